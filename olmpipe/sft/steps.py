"""SFT's steps of the training job (:func:`olmpipe.job.run.run_job`): the pairs as TRL's
prompt-completion dataset, ``SFTConfig``, and ``SFTTrainer``.

Each pair (:mod:`olmpipe.sft.pairs`) becomes one row: ``prompt`` is GRPO's prompt
(:func:`olmpipe.prompts.build_messages`: the olmOCR instruction, then the page image), ``completion``
the answer as the assistant's turn (front matter + page text; the chat template closes it with the
end token GRPO's EOS reward looks for), ``images`` the page. TRL's vision collator
(``DataCollatorForVisionLanguageModeling``, trl 1.16 ``sft_trainer.py:419-505``) tokenizes prompt
and completion with the processor and, with ``completion_only_loss`` (on for prompt-completion
data), puts the loss on the answer only. The training set's identity is the pairs' names, image
hashes and answers, in order: a resume on other pairs stops like any changed setting.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from olmpipe.job.kinds import SFT
from olmpipe.job.setup import JobSetup
from olmpipe.job.steps import BuiltTrainer, Prepared, TrainerSteps, TrainingSet

__all__ = ["SFTSteps", "pairs_dataset", "pairs_identity"]

logger = logging.getLogger(__name__)


def pairs_identity(pairs: list[Any]) -> dict[str, Any]:
    """``{"pages": n, "sha256": ...}`` of the pairs in order (name, image hash, answer)."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(json.dumps([pair.name, pair.image_sha256, pair.target], ensure_ascii=False).encode())
        digest.update(b"\n")
    return {"pages": len(pairs), "sha256": digest.hexdigest()}


def pairs_dataset(pairs: list[Any]) -> Any:
    """The pairs as a ``datasets.Dataset`` of prompt, completion and images (decoded when read)."""
    from datasets import Dataset, Sequence
    from datasets import Image as ImageFeature

    from olmpipe.prompts import build_messages

    rows = [{"prompt": build_messages(),
             "completion": [{"role": "assistant", "content": [{"type": "text", "text": pair.target}]}],
             "images": [pair.image]} for pair in pairs]
    return Dataset.from_list(rows).cast_column("images", Sequence(ImageFeature()))


class SFTSteps(TrainerSteps):
    """SFT's steps of the training job (see the module docstring)."""

    kind = SFT

    def training_set(self, setup: JobSetup, pages: str | Path, tests_dir: str | Path) -> TrainingSet:
        """The pairs file ``pages`` (rule ``sft_pairs``'s output) as the training set."""
        from olmpipe.job.data import PageIndexError
        from olmpipe.records.sft import read_pairs

        pairs = read_pairs(pages, error=PageIndexError)
        if not pairs:
            raise PageIndexError(f"{pages}: no SFT pairs to train on")
        sources = sorted({p.source for p in pairs})
        summary = {"split": "train", "pages": len(pairs), "sources": sources,
                   "target_chars": sum(len(p.target) for p in pairs)}
        logger.info("SFT on %d pairs from %s", len(pairs), ", ".join(sources))
        # the bench pages among the pairs: recorded as trained on (olmpipe.job.trained)
        pages = tuple((p.pdf, p.page) for p in pairs if p.pdf is not None and p.page is not None)
        return TrainingSet(pairs_dataset(pairs), None, summary, pairs_identity(pairs), pages=pages)

    def prepare(self, setup: JobSetup, processor: Any, data: TrainingSet) -> Prepared:
        """Nothing besides the model; the record of what trains the weights: the pairs' summary, LoRA."""
        peft = dict(setup.peft) if setup.peft["enabled"] else None
        return Prepared({"dataset": dict(data.summary), "peft": peft})

    def trainer_args(self, setup: JobSetup, prepared: Prepared, data: TrainingSet, report_to: list[str],
                     stack: contextlib.ExitStack) -> Any:
        from olmpipe.sft.args import sft_config

        return sft_config(setup.knobs, output_dir=str(setup.run_dir), seed=setup.seed, device=setup.device,
                          dtype=setup.precision.compute, report_to=report_to)

    def build_trainer(self, setup: JobSetup, loaded: Any, data: TrainingSet, prepared: Prepared,
                      args: Any) -> BuiltTrainer:
        from olmpipe.sft.trainer import ResumableSFTTrainer

        trainer = ResumableSFTTrainer(model=loaded.model, args=args, train_dataset=data.dataset,
                                      processing_class=loaded.processor, peft_config=loaded.peft_config)
        return BuiltTrainer(trainer)

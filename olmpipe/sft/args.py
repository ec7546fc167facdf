"""``SFTConfig`` from the ``sft`` config section: every knob comes from ``sft.args``.

The arguments set here are consequences of the run, as for GRPO (:mod:`olmpipe.train.args`):
``output_dir``, ``seed``/``data_seed`` (the seed also fixes the data order: transformers' seedable
sampler draws epoch ``e``'s permutation from ``data_seed + e``, so a resumed run sees the pages of
an uninterrupted one), ``bf16``/``use_cpu`` (mixed precision over float32 weights,
:mod:`olmpipe.job.precision`), ``report_to``, ``remove_unused_columns=False`` (the image column
reaches TRL's vision collator), ``save_strategy``/``logging_strategy`` = ``steps`` and
``save_total_limit=None`` (olmpipe rotates checkpoints itself after each commit,
:class:`olmpipe.job.callbacks.RunState`).

>>> from olmpipe.config import load_config
>>> from olmpipe.job.kinds import SFT
>>> cfg = load_config()
>>> args = sft_config(SFT.knobs(cfg["sft"], 0), output_dir="/tmp/x", seed=0, device="cpu")
>>> args.bf16, args.remove_unused_columns, args.max_length is None
(False, False, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def sft_config(knobs: Mapping[str, Any], *, output_dir: str, seed: int, device: str, dtype: str = "float32",
               report_to: list[str] | None = None) -> Any:
    """The ``SFTConfig`` of one seed's run from its ``knobs`` (:meth:`olmpipe.job.kinds.JobKind.knobs`)."""
    from trl import SFTConfig

    from olmpipe.compat.transformers import for_installed

    knobs = for_installed(dict(knobs), SFTConfig)
    knobs["save_total_limit"] = None  # applied after each checkpoint's commit (olmpipe.job.checkpoints.rotate)
    return SFTConfig(
        output_dir=output_dir,
        seed=seed,
        data_seed=seed,
        bf16=dtype == "bfloat16",
        fp16=False,
        use_cpu=device == "cpu",
        report_to=list(report_to or []),
        remove_unused_columns=False,
        save_strategy="steps",
        logging_strategy="steps",
        **knobs,
    )

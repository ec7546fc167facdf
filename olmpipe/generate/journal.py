"""Generation through a resume journal: the engine of every stage that makes a model write pages
(baseline, evaluate: :mod:`olmpipe.evaluate.engine`; the difficulty stage: :mod:`olmpipe.difficulty`).

Every batch of records is appended to ``generations.journal.jsonl`` as soon as it exists. A new run
keeps the journal lines whose settings fingerprint (:func:`generation_fingerprint`: decoding
settings, backend, model identity, prompt, generation code), page image hash and key match, and
generates only the rest; generations that failed in the backend are retried. The journal is not a
Snakemake output on purpose: Snakemake deletes a job's declared outputs before it runs and after it
fails, so ``generations.jsonl`` (a declared output) is written in one piece at the end, from it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.codeversion import rule_code_version
from olmpipe.generate import (
    DecodingSettings,
    GenerationBackend,
    PipelineMode,
    PipelineSettings,
    backend_identity,
    iter_generate,
    make_backend,
)
from olmpipe.generate.base import FAILURE_ERROR
from olmpipe.generate.decoding import decoding_fingerprint
from olmpipe.records.files import read_journal
from olmpipe.records.generations import JOURNAL_NAME, GenerationRecord, append_generations, write_generations

logger = logging.getLogger(__name__)

__all__ = ["JournaledGeneration", "check_backend_errors", "generate_journaled", "generation_fingerprint",
           "reusable_records"]


def generation_fingerprint(generation: Mapping[str, Any], model_path: str | Path) -> str:
    """The fingerprint a finished generation must carry to be reused by a resumed run: the
    decoding fingerprint with the generation code's version (the ``generations`` entry of
    :data:`olmpipe.codeversion.RULE_CODE`: decoding and prompt, not scoring).

    The pipeline-compatible mode's settings enter only when it is on, so that runs made with it
    off keep the fingerprint they had before the mode existed (for the same code version).
    """
    extra: dict[str, Any] = {"code": rule_code_version("generations")}
    pipeline = PipelineSettings.from_config(generation)
    if pipeline.enabled:
        extra["pipeline"] = pipeline.fingerprint_fields()
    return decoding_fingerprint(
        DecodingSettings.from_config(generation), backend_identity(generation, model_path), extra
    )


def reusable_records(
    journal: Path, fingerprint: str, image_hashes: Mapping[str, str], keys: set[tuple[str, int, int]]
) -> dict[tuple[str, int, int], GenerationRecord]:
    """Finished generations of ``journal`` that a run with ``fingerprint`` may reuse, by key.

    A line is reused when its settings fingerprint and page image hash match and it did not fail
    in the backend; later lines win. The journal is rewritten to exactly the reused lines when
    anything else was in it, so it never mixes settings.
    """
    rows = read_journal(journal)
    kept: dict[tuple[str, int, int], GenerationRecord] = {}
    for row in rows:
        try:
            record = GenerationRecord.from_json(row)
        except (ValueError, TypeError) as exc:
            logger.warning("%s: ignoring a malformed generation record (%s)", journal, exc)
            continue
        if (
            record.key in keys
            and record.settings == fingerprint
            and record.image_sha256 == image_hashes.get(record.image)
            and record.failure != FAILURE_ERROR
        ):
            kept[record.key] = record
        else:
            kept.pop(record.key, None)
    if rows and len(kept) != len(rows):
        logger.info(
            "%s: keeping %d of %d earlier generations (others: other settings, images or failures)",
            journal,
            len(kept),
            len(rows),
        )
        write_generations(journal, kept.values())
    return kept


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="page",
        desc="generating",
        disable=not enabled or total == 0,
        dynamic_ncols=True,
        mininterval=1.0,
        file=sys.stderr,
    )


def _generate_missing(
    backend: GenerationBackend,
    todo: Sequence[Any],
    settings: DecodingSettings,
    journal: Path,
    done: dict[tuple[str, int, int], GenerationRecord],
    *,
    image_hashes: Mapping[str, str],
    model: str,
    fingerprint: str,
    progress: bool,
    pipeline: PipelineMode | None = None,
) -> tuple[float, float]:
    """Generate ``todo``, appending each batch to ``journal`` and ``done``; returns (wall s, model s)."""
    t0 = time.perf_counter()
    model_before = backend.model_seconds
    failed = 0
    with _progress(len(todo), progress) as bar:
        for batch in iter_generate(
            backend,
            todo,
            settings,
            image_hashes=image_hashes,
            model=model,
            fingerprint=fingerprint,
            pipeline=pipeline,
        ):
            append_generations(journal, batch)
            done.update((record.key, record) for record in batch)
            failed += sum(r.failed for r in batch)
            bar.update(len(batch))
            bar.set_postfix(failed=failed, refresh=False)
    return time.perf_counter() - t0, backend.model_seconds - model_before


@dataclass(frozen=True)
class JournaledGeneration:
    """What :func:`generate_journaled` made: one record per request (in request order) and its cost."""

    records: list[GenerationRecord]
    reused: int
    seconds: float
    model_seconds: float


def generate_journaled(
    requests: Sequence[Any],
    settings: DecodingSettings,
    generation: Mapping[str, Any],
    model_path: str | Path,
    out: Path,
    *,
    fingerprint: str,
    image_hashes: Mapping[str, str],
    name: str,
    resume: bool,
    progress: bool,
    threads: int = 1,
    backend: GenerationBackend | None = None,
    pipeline: PipelineMode | None = None,
    what: str = "",
) -> JournaledGeneration:
    """Generate ``requests`` through the resume journal ``out/generations.journal.jsonl``.

    Journal lines with the same ``fingerprint``, page image hash and key are reused (all of them
    are dropped first when ``resume`` is false); the rest is generated with ``backend`` (default:
    the one ``generation`` names, built here only when something is left to generate, on
    ``threads`` cores, and closed afterwards) and appended batch by batch. The generation engine
    of the baseline and evaluate stages and of the difficulty stage (:mod:`olmpipe.difficulty`).
    """
    journal = out / JOURNAL_NAME
    if not resume and journal.exists():
        journal.unlink()
    done = reusable_records(journal, fingerprint, image_hashes, {r.key for r in requests})
    todo = [r for r in requests if r.key not in done]
    logger.info(
        "%s: %s%d generations; %d reused, %d to generate with %s",
        name,
        f"{what} = " if what else "",
        len(requests),
        len(done),
        len(todo),
        generation["backend"],
    )
    seconds = model_seconds = 0.0
    if todo:
        owned = backend is None
        if owned:
            import torch

            # One of the job's cores goes to the transformers backend's page encoder, which
            # prepares the next batch while the current one generates.
            encoder = 1 if generation["backend"] == "transformers" and threads > 1 else 0
            torch.set_num_threads(max(1, int(threads) - encoder))
            backend = make_backend(generation, model_path)
        try:
            seconds, model_seconds = _generate_missing(
                backend,
                todo,
                settings,
                journal,
                done,
                image_hashes=image_hashes,
                model=name,
                fingerprint=fingerprint,
                progress=progress,
                pipeline=pipeline,
            )
        finally:
            if owned:
                backend.close()
    return JournaledGeneration(
        records=[done[r.key] for r in requests],
        reused=len(requests) - len(todo),
        seconds=seconds,
        model_seconds=model_seconds,
    )


def check_backend_errors(
    records: Sequence[GenerationRecord], generation: Mapping[str, Any], *, error: type[Exception] = RuntimeError
) -> None:
    """Raise ``error`` when more than ``generation.max_error_fraction`` of ``records`` failed in the backend.

    The journal already holds the finished generations, so the next run retries only the failed ones.
    """
    errors = [r for r in records if r.failure == FAILURE_ERROR]
    if errors and len(errors) / len(records) > generation["max_error_fraction"]:
        first = errors[0]
        raise error(
            f"{len(errors)} of {len(records)} generations failed in the {generation['backend']} backend "
            f"(more than generation.max_error_fraction={generation['max_error_fraction']}); first: "
            f"{first.pdf} page {first.page} repeat {first.repeat}: {first.error}. Fix the cause and rerun: "
            "finished pages are kept"
        )



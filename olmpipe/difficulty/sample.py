"""The sampling half of the difficulty stage: k completions per training page, scored like training.

:func:`run_difficulty` reads the ``train`` split of the page index as the trainer does
(:func:`olmpipe.job.data.build_examples`: same reward filters, so the same pages and tests), asks
the model for ``k`` completions per page at the trainer's sampling settings
(:mod:`olmpipe.difficulty.settings`) through the baseline's generation engine
(:func:`olmpipe.evaluate.engine.generate_journaled`: any backend, batched, journaled and resumable), scores
them with the trainer's rewards (:class:`olmpipe.difficulty.score.SampleScorer`) and writes into its
folder (``results/difficulty/``):

- ``generations.jsonl``: the k generations of every page (the baseline's record format; the
  journal ``generations.journal.jsonl`` beside it survives a kill, so a rerun generates only what
  is missing and a rerun after a reward change generates nothing);
- ``stats.jsonl``: one :class:`~olmpipe.records.difficulty.PageDifficulty` per page;
- ``summary.json``: counts (zero-spread, all-pass, all-fail pages), cost and settings.

One sampler per folder: a second one stops at once, naming the first
(:func:`olmpipe.records.generations.hold_journal`); under Snakemake the sampler stops when its
Snakemake is gone (``--exit-with-job``, :func:`olmpipe.procs.exit_with_job`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from olmpipe.codeversion import rule_code_version
from olmpipe.difficulty.score import CompletionIds, SampleScorer
from olmpipe.difficulty.settings import DifficultyError, decoding_settings, trainer_sampling
from olmpipe.generate import GenerationBackend, backend_identity, make_requests
from olmpipe.generate.decoding import decoding_fingerprint
from olmpipe.generate.journal import check_backend_errors, generate_journaled
from olmpipe.records.difficulty import (
    SAMPLED_PAGES_KEY,
    STATS_NAME,
    SUMMARY_NAME,
    PageDifficulty,
    write_stats,
    write_summary,
)
from olmpipe.records.files import file_sha256
from olmpipe.records.generations import (
    GENERATIONS_NAME,
    GenerationRecord,
    JournalInUseError,
    hold_journal,
    write_generations,
)

logger = logging.getLogger(__name__)

#: Completions handed to the rewards in one call (whole pages; the bench reward's pool scores them in parallel).
SCORE_BATCH = 256


def stage_fingerprint(cfg: Mapping[str, Any], model_path: str | Path) -> str:
    """The fingerprint a journaled generation must carry to be reused: decoding settings, backend,
    model identity, prompt and generation code (as the baseline's,
    :func:`olmpipe.evaluate.engine.generation_fingerprint`)."""
    return decoding_fingerprint(
        decoding_settings(cfg),
        backend_identity(cfg["generation"], model_path),
        {"code": rule_code_version("generations"), "stage": "difficulty"},
    )


def _scorer(cfg: Mapping[str, Any], model_path: str | Path, reward_funcs: Sequence[Callable[..., Any]] | None,
            reward_weights: Sequence[float] | None, tokenizer: Any) -> tuple[SampleScorer, Any]:
    """The scorer and the reward set to close afterwards (None when ``reward_funcs`` were given)."""
    from olmpipe.rewards import build_rewards

    if tokenizer is None:
        from olmpipe.models.load import load_processor

        tokenizer = load_processor(model_path)
    from olmpipe.models.load import model_eos_ids

    extra_eos = model_eos_ids(model_path) if reward_funcs is None else []
    owned = None
    if reward_funcs is None:
        owned = build_rewards(cfg["rewards"], tokenizer=tokenizer, extra_eos_ids=extra_eos)
        reward_funcs, reward_weights = owned.funcs, owned.weights
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    eos_id = tok.eos_token_id if tok.eos_token_id is not None else (extra_eos[0] if extra_eos else None)
    return SampleScorer(reward_funcs, weights, CompletionIds(tokenizer, eos_id)), owned


def run_difficulty(
    cfg: Mapping[str, Any],
    model_path: str | Path,
    pages_index: str | Path,
    tests_dir: str | Path,
    out_dir: str | Path,
    threads: int = 1,
    *,
    progress: bool = True,
    backend: GenerationBackend | None = None,
    reward_funcs: Sequence[Callable[..., Any]] | None = None,
    reward_weights: Sequence[float] | None = None,
    tokenizer: Any = None,
) -> dict[str, Any]:
    """Sample, score and write the statistics of every training page; returns the summary.

    ``cfg`` is a validated config (``generation``, ``rewards``, ``train`` and ``model.name`` are
    read). ``backend`` replaces the configured one (tests, benchmarks); ``reward_funcs`` and
    ``reward_weights`` replace the configured rewards, as :func:`olmpipe.train.run.train_seed`
    allows, and ``tokenizer`` the model folder's processor. Raises :class:`DifficultyError` for bad
    inputs and when more than ``generation.max_error_fraction`` of the generations failed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with hold_journal(out):  # one writer per journal: a second sampler stops here, naming the first
            return _sample(cfg, model_path, pages_index, tests_dir, out, threads, progress=progress, backend=backend,
                           reward_funcs=reward_funcs, reward_weights=reward_weights, tokenizer=tokenizer)
    except JournalInUseError as exc:
        raise DifficultyError(str(exc)) from None


def _sample(cfg: Mapping[str, Any], model_path: str | Path, pages_index: str | Path, tests_dir: str | Path,
            out: Path, threads: int, *, progress: bool, backend: GenerationBackend | None,
            reward_funcs: Sequence[Callable[..., Any]] | None, reward_weights: Sequence[float] | None,
            tokenizer: Any) -> dict[str, Any]:
    """:func:`run_difficulty` while holding the folder's journal."""
    from olmpipe.job.data import PageIndexError, build_examples

    generation, rewards_cfg = cfg["generation"], cfg["rewards"]
    settings = decoding_settings(cfg)
    name = cfg["model"]["name"]
    try:
        examples, dataset = build_examples(
            pages_index, tests_dir, split="train", types=rewards_cfg["bench"]["types"],
            jsonl_regex=rewards_cfg["bench"]["jsonl_regex"], reference_candidate=rewards_cfg["reference_candidate"],
        )
    except PageIndexError as exc:
        raise DifficultyError(str(exc)) from None
    if not examples:
        raise DifficultyError(f"{pages_index}: no train page has tests (after the reward filters); nothing to sample")
    pages = [{"pdf": ex.pdf, "page": ex.page, "image": ex.image} for ex in examples]
    image_hashes = {p["image"]: file_sha256(p["image"], 16) for p in pages}
    requests = make_requests(pages, settings.repeats)
    run = generate_journaled(
        requests, settings, generation, model_path, out,
        fingerprint=stage_fingerprint(cfg, model_path), image_hashes=image_hashes, name=name, resume=True,
        progress=progress, threads=threads, backend=backend, what=f"{len(pages)} pages x {settings.repeats} samples",
    )
    check_backend_errors(run.records, generation, error=DifficultyError)
    write_generations(out / GENERATIONS_NAME, run.records)

    t0 = time.perf_counter()
    scorer, owned = _scorer(cfg, model_path, reward_funcs, reward_weights, tokenizer)
    try:
        stats = _score_pages(scorer, examples, run.records, settings.repeats)
    finally:
        if owned is not None:
            owned.close()
    scoring_seconds = time.perf_counter() - t0
    write_stats(out / STATS_NAME, stats)
    summary = summarize(stats, run.records, cfg=cfg, scorer=scorer, reused=run.reused, seconds=run.seconds,
                        model_seconds=run.model_seconds, scoring_seconds=scoring_seconds)
    summary["dataset"] = dataset.to_dict()
    write_summary(out / SUMMARY_NAME, summary)
    logger.info(
        "%s: %d pages x %d samples; %d zero-spread (%d all pass, %d all fail), mean spread %s; %d generated, "
        "%d reused", name, summary["pages"], settings.repeats, summary["zero_spread"], summary["all_pass"],
        summary["all_fail"], summary["mean_spread"], summary["generated"], summary["reused"],
    )
    return summary


def _score_pages(scorer: SampleScorer, examples: Sequence[Any], records: Sequence[GenerationRecord],
                 k: int) -> list[PageDifficulty]:
    """Score the records page by page (k consecutive records per example), a few pages per reward call."""
    per_call = max(1, SCORE_BATCH // k)
    stats: list[PageDifficulty] = []
    for start in range(0, len(examples), per_call):
        chunk = examples[start : start + per_call]
        groups = [(ex, records[(start + j) * k : (start + j + 1) * k]) for j, ex in enumerate(chunk)]
        for ex, group in groups:
            if {(r.pdf, r.page) for r in group} != {(ex.pdf, ex.page)}:
                raise DifficultyError(f"internal error: generations out of order at {ex.pdf} page {ex.page}")
        stats += scorer.score(groups)
    return stats


def summarize(stats: Sequence[PageDifficulty], records: Sequence[GenerationRecord], *, cfg: Mapping[str, Any],
              scorer: SampleScorer, reused: int, seconds: float, model_seconds: float,
              scoring_seconds: float) -> dict[str, Any]:
    """The ``summary.json`` object of a sampling run."""
    spreads = [p.spread for p in stats if p.spread is not None]
    scored = [p for p in stats if p.spread is not None]
    zero = sum(p.zero_spread for p in stats)
    return {
        "model": cfg["model"]["name"],
        "backend": cfg["generation"]["backend"],
        "pages": len(stats),
        SAMPLED_PAGES_KEY: [{"pdf": p.pdf, "page": p.page} for p in stats],
        "samples_per_page": decoding_settings(cfg).repeats,
        "sampling": trainer_sampling(cfg["train"]),
        "seed": cfg["train"]["difficulty"]["seed"],
        "rewards": dict(zip(scorer.names, scorer.weights, strict=True)),
        "generations": len(records),
        "reused": reused,
        "generated": len(records) - reused,
        "failed_error": sum(p.errors for p in stats),
        "no_eos": sum(p.no_eos for p in stats),
        "unscored_pages": len(stats) - len(scored),
        "zero_spread": zero,
        "zero_spread_share": round(zero / len(scored), 6) if scored else None,
        "all_pass": sum(p.all_pass for p in stats),
        "all_fail": sum(p.all_fail for p in stats),
        "mean_spread": round(sum(spreads) / len(spreads), 6) if spreads else None,
        "mean_reward": round(sum(p.mean for p in scored) / len(scored), 6) if scored else None,
        "reward_metrics": scorer.metrics(),
        "generation_seconds": round(seconds, 3),
        "model_seconds": round(model_seconds, 3),
        "scoring_seconds": round(scoring_seconds, 3),
    }

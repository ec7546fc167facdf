"""The generate-and-score engine of the baseline and evaluate stages: one model over the eval pages.

    olmpipe baseline --model results/model/tiny          # stage 3 (olmpipe.evaluate.baseline)
    olmpipe evaluate --model results/train/soup/model    # stage 5 (olmpipe.evaluate.stage)

:func:`run_generation_and_scoring` reads the ``eval`` split of the page index
(``results/validate/pages.jsonl``) and the validated tests (``results/validate/tests/*.jsonl``),
makes the model answer every page ``generation.repeats`` times with the configured backend, and
writes to one run folder (``results/baseline/<model name>/`` for the base model,
``results/evaluate/<model name>/`` for the trained one). The config sections ``generation`` and
``eval_run`` steer it for both stages, so the two runs never differ in settings.

- ``generations.jsonl``: the raw generations (one line per pdf/page/repeat: text, front matter,
  finish reason, token counts, every attempt, timings, failed flag);
- ``candidate/<pdf path without .pdf>_pg<page>_repeat<k>.md``: the page texts in olmOCR-Bench's
  candidate layout, so its own ``benchmark.py`` can score them;
- ``scores.json`` / ``scores.csv`` (overall, per test type, per JSONL file, 95% interval; beside
  them the same under the short-answer guard, :mod:`olmpipe.bench.shortguard`) and
  ``verdicts.jsonl`` (one line per test and repeat), from :mod:`olmpipe.bench`;
- ``summary.json``: run statistics (pages, EOS share, valid front matter share, failed pages,
  tokens, throughput; in the pipeline-compatible mode also ``pipeline``: pages retried on a
  rotated image, kept rotations, fallback pages, see :func:`olmpipe.generate.pipeline.pipeline_counts`);
- ``rotated/``: the rotated page images of the pipeline-compatible mode's rotation retries.

Resume: with ``eval_run.resume`` a run generates through the resume journal
``generations.journal.jsonl`` (:mod:`olmpipe.generate.journal`): earlier generations with the same
settings, model and page images are kept, the rest is generated. A journal has one writer: a second
job on the run folder stops at once, naming the first (:func:`olmpipe.records.generations.hold_journal`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from olmpipe.bench.folders import bench_test_files
from olmpipe.generate import (
    DecodingSettings,
    GenerationBackend,
    GenerationError,
    PipelineMode,
    PipelineSettings,
    make_requests,
)
from olmpipe.generate.base import FAILURE_ERROR
from olmpipe.generate.journal import check_backend_errors, generate_journaled, generation_fingerprint
from olmpipe.generate.pipeline import pipeline_counts
from olmpipe.layout import BENCH_TESTS_GLOB, rotated_dir
from olmpipe.records.candidates import CANDIDATE_DIR, write_candidate
from olmpipe.records.files import file_sha256
from olmpipe.records.generations import (
    GENERATIONS_NAME,
    GenerationRecord,
    JournalInUseError,
    hold_journal,
    write_generations,
)
from olmpipe.records.pages import read_page_index
from olmpipe.records.scores import write_scores, write_summary
from olmpipe.records.verdicts import VERDICTS_NAME, write_verdicts

logger = logging.getLogger(__name__)

class EvalRunError(RuntimeError):
    """Bad stage input (page index, tests) or a run with too many backend failures."""


@dataclass(frozen=True)
class RunSummary:
    """What one generation-and-scoring run did; also written to ``summary.json``."""

    model: str
    backend: str
    pages: int
    repeats: int
    generations: int
    reused: int
    generated: int
    failed_no_eos: int
    failed_error: int
    eos_share: float
    front_matter_valid_share: float
    completion_tokens: int
    generation_seconds: float
    pages_per_s: float
    model_seconds: float
    overall: float | None
    pipeline: dict[str, Any] | None = None
    #: the overall score under the short-answer guard (olmOCR-Bench's is ``overall``)
    overall_guarded: float | None = None
    #: Eval pages the model was trained on ({"pdf", "page", "by"}), scored because
    #: ``eval_run.on_trained_pages`` is ``flag`` (:func:`trained_eval_pages`); None: there were none.
    trained_pages: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` object; ``pipeline`` only when the pipeline-compatible mode ran,
        ``trained_pages`` only when eval pages the model trained on were scored."""
        data = asdict(self)
        for key in ("pipeline", "trained_pages"):
            if data[key] is None:
                del data[key]
        return data


# ---------------------------------------------------------------- inputs


def trained_eval_pages(model_path: str | Path, pages: Sequence[Mapping[str, Any]], on_trained_pages: str,
                       pages_index: str | Path) -> list[dict[str, Any]] | None:
    """The eval ``pages`` that ``model_path`` was trained on (its folder's record of trained pages:
    :mod:`olmpipe.job.trained`): raises :class:`EvalRunError` naming them when ``on_trained_pages`` is
    ``refuse``; with ``flag`` returns them ({"pdf", "page", "by"}, logged) to be flagged in the run's
    summary, the comparison and the report. None when there are none (or the model records none)."""
    from olmpipe.records.train import TRAINED_PAGES_NAME, trained_pages_of

    if not Path(model_path).is_dir():
        return None
    trained = trained_pages_of(model_path, error=EvalRunError)
    seen = sorted({(str(p["pdf"]), int(p["page"])) for p in pages} & set(trained))
    if not seen:
        return None
    shown = ", ".join(f"{pdf} page {page} ({trained[(pdf, page)]})" for pdf, page in seen[:5])
    what = (f"{len(seen)} of the {len(pages)} eval pages of {pages_index} are pages {model_path} was trained on "
            f"({Path(model_path) / TRAINED_PAGES_NAME} lists them: {shown}{' ...' if len(seen) > 5 else ''}): its "
            "scores there measure memory, not reading")
    if on_trained_pages == "refuse":
        raise EvalRunError(f"{what}. Evaluate on pages it was not trained on (bench.split as it was when it was "
                           "trained, or a separate bench.eval_dir), or set eval_run.on_trained_pages: flag to score "
                           "them anyway, flagged in the comparison and the report")
    logger.warning("%s; scored anyway and flagged (eval_run.on_trained_pages: flag)", what)
    return [{"pdf": pdf, "page": page, "by": trained[(pdf, page)]} for pdf, page in seen]



def load_eval_tests(tests_dir: str | Path, pages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The validated tests of the given pages, plus olmOCR-Bench's automatic baseline tests.

    The files are those the page entries name in ``jsonl_files`` (paths under ``tests_dir``, e.g.
    ``dataset.jsonl`` or ``eval/dataset.jsonl`` for a separate eval bench); entries without that
    map fall back to every top-level ``*.jsonl``. A test is kept when its page is among ``pages``
    and, where the entry lists ``test_ids``, its id is listed for that page. The file name is the
    test's JSONL category. A PDF without a ``baseline`` test gets one on page 1 when that page is
    scored, as olmOCR-Bench's benchmark does.
    """
    from olmpipe.bench import baseline_tests_for, load_tests

    tests_dir = Path(tests_dir)
    named = sorted({str(f) for p in pages for f in (p.get("jsonl_files") or {}).values()})
    files = [tests_dir / f for f in named] if named else [Path(f) for f in bench_test_files(tests_dir)]
    if not files:
        raise EvalRunError(f"{tests_dir}: no {BENCH_TESTS_GLOB} test files; run the validate stage")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise EvalRunError(
            f"{tests_dir}: test file(s) named by the page index do not exist: {', '.join(missing)}"
        )
    wanted = {(str(p["pdf"]), int(p["page"])): p for p in pages}
    tests = []
    for file in files:
        rel = file.relative_to(tests_dir).as_posix()
        for t in load_tests(file):
            entry = wanted.get((t.pdf, t.page))
            if entry is None:
                continue
            if "test_ids" in entry and t.id not in entry["test_ids"]:
                continue
            if (entry.get("jsonl_files") or {}).get(t.id, rel) != rel:
                continue
            tests.append(t)
    pdfs = sorted({pdf for pdf, _ in wanted})
    extra = [t for t in baseline_tests_for(pdfs, tests) if (t.pdf, t.page) in wanted]
    return tests + extra


def pdf_paths(pages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """pdf -> the PDF file (``<bench_dir>/pdfs/<pdf>``) of page index entries that name their bench."""
    return {
        str(p["pdf"]): str(Path(str(p["bench_dir"])) / "pdfs" / str(p["pdf"]))
        for p in pages
        if "bench_dir" in p
    }


# ---------------------------------------------------------------- outputs


def _score_and_write(tests: Sequence[Any], records: Sequence[GenerationRecord], out_dir: Path) -> Any:
    """Score the page texts with the unit-test engine; write scores.json/.csv and verdicts.jsonl."""
    from olmpipe.bench import score_candidate

    score = score_candidate(tests, {r.key: r.text for r in records})
    write_scores(out_dir, score)
    write_verdicts(out_dir / VERDICTS_NAME, score.verdicts)
    return score


def summarize(
    records: Sequence[GenerationRecord],
    *,
    model: str,
    backend: str,
    pages: int,
    repeats: int,
    reused: int,
    seconds: float,
    model_seconds: float,
    overall: float | None,
    overall_guarded: float | None = None,
    trained_pages: list[dict[str, Any]] | None = None,
) -> RunSummary:
    """Run statistics over all records (reused ones included); throughput over the generated ones."""
    n = len(records)
    generated = n - reused
    return RunSummary(
        model=model,
        backend=backend,
        pages=pages,
        repeats=repeats,
        generations=n,
        reused=reused,
        generated=generated,
        failed_no_eos=sum(r.failed and r.failure != FAILURE_ERROR for r in records),
        failed_error=sum(r.failure == FAILURE_ERROR for r in records),
        eos_share=round(sum(r.finish_reason == "stop" for r in records) / n, 4) if n else 0.0,
        front_matter_valid_share=round(sum(r.front_matter is not None for r in records) / n, 4) if n else 0.0,
        completion_tokens=sum(r.completion_tokens for r in records),
        generation_seconds=round(seconds, 3),
        pages_per_s=round(generated / seconds, 4) if seconds > 0 and generated else 0.0,
        model_seconds=round(model_seconds, 3),
        overall=overall,
        pipeline=pipeline_counts(records),
        overall_guarded=overall_guarded,
        trained_pages=trained_pages,
    )


# ---------------------------------------------------------------- the run


def run_generation_and_scoring(
    cfg: Mapping[str, Any],
    model_path: str | Path,
    pages_index: str | Path,
    tests_dir: str | Path,
    out_dir: str | Path,
    threads: int = 1,
    *,
    model_name: str | None = None,
    backend: GenerationBackend | None = None,
) -> RunSummary:
    """Generate the eval pages of ``pages_index`` with ``model_path`` and score them into ``out_dir``.

    The single code path of the baseline and evaluate stages: ``cfg`` is a validated config (its
    ``generation`` and ``eval_run`` sections are used), ``threads`` the job's CPU cores (torch gets
    all of them but one, which the transformers backend's page encoder uses).
    ``backend`` replaces the one the config names (tests, benchmarks, reusing a loaded model); it
    is built only when there is something left to generate, and closed afterwards only if built
    here. Raises :class:`EvalRunError` for bad inputs or when more than
    ``generation.max_error_fraction`` of the generations failed in the backend (the journal is
    written first, so the next run retries only those).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with hold_journal(out):  # one writer per run folder: a second job stops here, naming the first
            return _generate_and_score(cfg, model_path, pages_index, tests_dir, out, threads, model_name=model_name,
                                       backend=backend)
    except JournalInUseError as exc:
        raise EvalRunError(str(exc)) from None


def _generate_and_score(cfg: Mapping[str, Any], model_path: str | Path, pages_index: str | Path,
                        tests_dir: str | Path, out: Path, threads: int, *, model_name: str | None,
                        backend: GenerationBackend | None) -> RunSummary:
    """:func:`run_generation_and_scoring` while holding the run folder's journal."""
    generation, stage = cfg["generation"], cfg["eval_run"]
    settings = DecodingSettings.from_config(generation)
    name = model_name or cfg["model"]["name"]

    # the eval split of the page index ((pdf, page) pairs are unique), by pdf and page
    pages = sorted(read_page_index(pages_index, error=EvalRunError, split="eval"),
                   key=lambda r: (str(r["pdf"]), r["page"]))
    if stage["max_pages"] is not None:
        pages = pages[: stage["max_pages"]]
    if not pages:
        raise EvalRunError(f"{pages_index}: no eval pages to score (check bench.split / bench.eval_dir)")
    trained_pages = trained_eval_pages(model_path, pages, stage["on_trained_pages"], pages_index)
    tests = load_eval_tests(tests_dir, pages)
    for page in pages:
        if not Path(page["image"]).is_file():
            raise EvalRunError(
                f"{pages_index}: page image {page['image']} ({page['pdf']} page {page['page']}) "
                "does not exist; rerun the rasterize stage"
            )
    image_hashes = {str(p["image"]): file_sha256(p["image"], 16) for p in pages}
    requests = make_requests(pages, settings.repeats)

    run = generate_journaled(
        requests,
        settings,
        generation,
        model_path,
        out,
        fingerprint=generation_fingerprint(generation, model_path),
        image_hashes=image_hashes,
        name=name,
        resume=stage["resume"],
        progress=stage["progress"],
        threads=threads,
        backend=backend,
        pipeline=PipelineMode(PipelineSettings.from_config(generation), rotated_dir(out), pdf_paths(pages)),
        what=f"{len(pages)} pages x {settings.repeats} repeats",
    )
    records = run.records
    check_backend_errors(records, generation, error=EvalRunError)
    write_generations(out / GENERATIONS_NAME, records)  # this run's records, in order
    write_candidate(out / CANDIDATE_DIR, records)
    score = _score_and_write(tests, records, out)
    summary = summarize(
        records,
        model=name,
        backend=generation["backend"],
        pages=len(pages),
        repeats=settings.repeats,
        reused=run.reused,
        seconds=run.seconds,
        model_seconds=run.model_seconds,
        overall=getattr(score, "overall", None),
        overall_guarded=(getattr(score, "guarded", None) or {}).get("overall"),
        trained_pages=trained_pages,
    )
    write_summary(out, summary.to_json())
    logger.info(
        "%s: %d generations (%d new, %.3f pages/s), %d without EOS, %d backend errors; overall %.4f "
        "(with the short-answer guard %.4f)",
        name,
        summary.generations,
        summary.generated,
        summary.pages_per_s,
        summary.failed_no_eos,
        summary.failed_error,
        summary.overall or 0.0,
        summary.overall_guarded or 0.0,
    )
    if summary.pipeline:
        logger.info(
            "%s: pipeline mode: %d accepted, %d retried on a rotated image, %d kept a rotation, "
            "%d kept the last valid answer, %d fell back",
            name,
            summary.pipeline["accepted"],
            summary.pipeline["rotation_retried"],
            summary.pipeline["rotated"],
            summary.pipeline["last_valid"],
            summary.pipeline["fallback"],
        )
    return summary


def run_logged(*args: Any, **kwargs: Any) -> int:
    """:func:`run_generation_and_scoring` (same arguments) for a command line: 0, or 1 with one logged line.

    The ``main`` of both stage entry points (:mod:`olmpipe.evaluate.baseline`, :mod:`olmpipe.evaluate.stage`) ends here.
    """
    try:
        run_generation_and_scoring(*args, **kwargs)
    except (EvalRunError, GenerationError) as exc:
        logger.error("%s", exc)
        return 1
    return 0

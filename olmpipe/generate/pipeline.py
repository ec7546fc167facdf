"""olmOCR's pipeline-compatible decoding: temperature ladder by attempt, rotation retry, fallback pages.

Published olmOCR-Bench numbers come from olmOCR's own pipeline (``olmocr/pipeline.py``, v0.4.27,
called per page by ``olmocr/bench/runners/run_olmocr_pipeline.py``), not from one plain sample.
This module reproduces its per-page logic (``process_page``, pipeline.py:281-375) on top of any
:class:`~olmpipe.generate.base.GenerationBackend`:

- up to ``max_page_retries`` attempts (``--max_page_retries`` default 8, pipeline.py:1221; the bench
  runner uses 8 too, run_olmocr_pipeline.py:33); attempt k (0-based) samples at
  ``temperatures[min(k, len - 1)]`` (``TEMPERATURE_BY_ATTEMPT``, pipeline.py:85 and 164-165);
- an answer is *valid* when it ended with EOS and prompt + completion tokens fit in
  ``max_context_tokens`` (pipeline.py:196-203); it *parses* when its front matter does (a parse
  error makes ``try_single_page`` return None, pipeline.py:227-229; here
  :func:`olmpipe.prompts.parse_page_output` decides); it is *accepted* when valid, parsed and
  ``is_rotation_valid`` (pipeline.py:302);
- when the first answer parses and says the rotation is wrong, the page image is rotated by its
  ``rotation_correction`` and the remaining attempts run sequentially, each parsed answer adding
  its correction to the cumulative rotation modulo 360 (pipeline.py:298-320); rotation retries
  consume the same attempt counter, so they also climb the temperature ladder;
- otherwise the remaining attempts run at rotation 0 (pipeline.py:334-362; the reference fires them
  in parallel when its server queue is empty and takes whichever valid answer finishes first,
  here they run in order and the lowest attempt wins: the same attempts, a deterministic choice);
- when no answer is accepted, the *last* attempt's answer is kept if it parsed and is valid (its
  rotation flag aside, pipeline.py:322-326 and 364-368); otherwise the page *falls back*
  (``make_fallback_result``, pipeline.py:233-250). The pipeline's fallback text is poppler's
  ``pdftotext`` of that page (``get_anchor_text(..., pdf_engine="pdftotext")``,
  olmocr/prompts/anchor.py:52-60), but olmOCR-Bench's runner discards fallback pages
  (run_olmocr_pipeline.py:86 returns None) and ``olmocr/bench/convert.py:71-76`` then writes an
  empty candidate file. ``fallback: empty`` therefore reproduces the published bench numbers;
  ``pdftotext`` the pipeline's documents; ``pdfium`` the same text layer without poppler.

Rotation is applied to the rasterized page PNG with PIL's ``Image.transpose`` (90 ->
``ROTATE_90``, 180 -> ``ROTATE_180``, 270 -> ``ROTATE_270``), exactly as ``build_page_query`` does
to its freshly rendered page (pipeline.py:114-128): the reference renders the page unrotated at the
target size and transposes the PNG, so transposing our page image at the same size is the same
image, pixel for pixel, without rendering the PDF again. The rotated PNGs are written once to
``rotated_dir`` and handed to the backend as the request's image, so every backend works unchanged.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from olmpipe.generate.base import (
    FAILURE_ERROR,
    FAILURE_INVALID,
    FAILURE_NO_EOS,
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    Attempt,
    Completion,
    GenerationBackend,
    GenerationError,
    PageRequest,
    Sampling,
)
from olmpipe.prompts import PROMPT_NAME, PageOutput, parse_page_output
from olmpipe.records.files import atomic_path
from olmpipe.records.generations import GenerationRecord

logger = logging.getLogger(__name__)

FALLBACKS = ("empty", "pdftotext", "pdfium")
#: Outcomes of a page (``pipeline.outcome`` of its record).
OUTCOME_ACCEPTED = "accepted"
OUTCOME_LAST_VALID = "last_valid"
OUTCOME_FALLBACK = "fallback"
#: Seconds ``pdftotext`` may take for one page (olmocr/prompts/anchor.py:55).
PDFTOTEXT_TIMEOUT_S = 60
#: Largest fallback text kept, in characters (a hostile text layer must not fill memory or disk).
MAX_FALLBACK_CHARS = 1_000_000


@dataclass(frozen=True)
class PipelineSettings:
    """Config section ``generation.pipeline`` (see the module docstring)."""

    enabled: bool = False
    max_page_retries: int = 8
    rotation_retry: bool = True
    fallback: str = "empty"
    max_context_tokens: int = 16384

    def __post_init__(self) -> None:
        if self.max_page_retries < 1 or self.max_context_tokens < 1:
            raise ValueError(
                "generation.pipeline: max_page_retries and max_context_tokens must be at least 1"
            )
        if self.fallback not in FALLBACKS:
            raise ValueError(
                f"generation.pipeline.fallback: {self.fallback!r} is not one of {', '.join(FALLBACKS)}"
            )

    @classmethod
    def from_config(cls, generation: Mapping[str, Any]) -> PipelineSettings:
        """Build from the validated ``generation`` section (its ``pipeline`` subsection)."""
        p = generation["pipeline"]
        return cls(
            enabled=bool(p["enabled"]),
            max_page_retries=int(p["max_page_retries"]),
            rotation_retry=bool(p["rotation_retry"]),
            fallback=str(p["fallback"]),
            max_context_tokens=int(p["max_context_tokens"]),
        )

    def fingerprint_fields(self) -> dict[str, Any]:
        """What changes the records; added to the settings fingerprint only when the mode is on."""
        return asdict(self)


@dataclass(frozen=True)
class PipelineMode:
    """Everything the pipeline mode needs besides the decoding settings.

    ``pdf_paths`` maps a request's ``pdf`` to the PDF file (for ``pdftotext``/``pdfium`` fallback
    text); ``rotated_dir`` receives the rotated page images.
    """

    settings: PipelineSettings
    rotated_dir: Path
    pdf_paths: Mapping[str, str] = field(default_factory=dict)


def ladder_temperature(temperatures: Sequence[float], attempt: int) -> float:
    """Temperature of 0-based ``attempt``: the ladder's entry, its last one beyond its end (pipeline.py:164)."""
    return float(temperatures[min(attempt, len(temperatures) - 1)])


def rotate_image(image: str, angle: int, rotated_dir: Path, request: PageRequest) -> str:
    """The page image transposed by ``angle`` (90/180/270, as build_page_query does), written once.

    Returns the rotated PNG's path, ``<rotated_dir>/<pdf without .pdf>/pg<page>_rot<angle>.png``.
    """
    from PIL import Image

    transpose = {
        90: Image.Transpose.ROTATE_90,
        180: Image.Transpose.ROTATE_180,
        270: Image.Transpose.ROTATE_270,
    }
    if angle not in transpose:
        raise ValueError(f"rotation {angle} is not one of 90, 180, 270")
    stem = request.pdf[: -len(".pdf")] if request.pdf.lower().endswith(".pdf") else request.pdf
    target = rotated_dir / stem / f"pg{request.page}_rot{angle}.png"
    with atomic_path(target) as tmp, Image.open(image) as img:
        img.transpose(transpose[angle]).save(tmp, format="PNG")
    return str(target)


def fallback_text(source: str, pdf_path: str | None, page: int) -> tuple[str, str | None]:
    """The text of a fallback page and, when it could not be read, why (then the text is empty).

    Never raises for a bad page: a missing PDF, a missing ``pdftotext``, a timeout or a broken text
    layer give an empty text and a message for the record (and a warning in the log).
    """
    if source == "empty":
        return "", None
    if not pdf_path or not Path(pdf_path).is_file():
        text, error = "", f"{source}: PDF {pdf_path!r} not found"
    elif source == "pdftotext":
        text, error = _pdftotext(str(pdf_path), page)
    else:
        text, error = _pdfium_text(str(pdf_path), page)
    if error:
        logger.warning("fallback text of %s page %d: %s", pdf_path, page, error)
    return text[:MAX_FALLBACK_CHARS], error


def _pdftotext(pdf_path: str, page: int) -> tuple[str, str | None]:
    """poppler's text of one page, as olmocr/prompts/anchor.py:52-60 runs it (60 s bound)."""
    try:
        proc = subprocess.run(
            ["pdftotext", "-f", str(page), "-l", str(page), pdf_path, "-"],
            capture_output=True,
            timeout=PDFTOTEXT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return "", "pdftotext is not installed (Debian: poppler-utils)"
    except subprocess.TimeoutExpired:
        return "", f"pdftotext took more than {PDFTOTEXT_TIMEOUT_S} s"
    except OSError as exc:
        return "", f"pdftotext could not run: {exc}"
    if proc.returncode != 0:
        reason = proc.stderr.decode("utf-8", "replace").strip()[:300]
        return "", f"pdftotext exited with {proc.returncode}: {reason}"
    return proc.stdout.decode("utf-8", "replace"), None


def _pdfium_text(pdf_path: str, page: int) -> tuple[str, str | None]:
    """The text layer of one page via pypdfium2 (olmocr/prompts/anchor.py ``_get_pdfium``)."""
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(pdf_path)
    except (pdfium.PdfiumError, OSError, ValueError) as exc:
        return "", f"pdfium cannot open {pdf_path}: {exc}"
    try:
        if not 1 <= page <= len(doc):
            return "", f"pdfium: {pdf_path} has no page {page}"
        pdf_page = doc[page - 1]
        textpage = pdf_page.get_textpage()
        text = textpage.get_text_bounded()
        textpage.close()
        pdf_page.close()
        return text, None
    except (pdfium.PdfiumError, OSError, ValueError) as exc:
        return "", f"pdfium cannot read the text of {pdf_path} page {page}: {exc}"
    finally:
        doc.close()


@dataclass
class _Page:
    """The state of one request while its attempts run."""

    request: PageRequest
    attempts: list[dict[str, Any]] = field(default_factory=list)
    rotation: int = 0
    path: str = "first"  # first | rotation | retry
    last: tuple[Completion, PageOutput] | None = None  # the last attempt's answer if it parsed
    final: Completion | None = None  # the last completion of any kind
    kept: Completion | None = None  # the last completion that produced text
    outcome: str | None = None
    rotation_attempts: int = 0


def _valid(completion: Completion, limit: int) -> bool:
    return (
        completion.finish_reason == FINISH_STOP
        and completion.prompt_tokens + completion.completion_tokens <= limit
    )


def _advance(page: _Page, completion: Completion, attempt: int, settings: PipelineSettings) -> None:
    """Apply process_page's rules (pipeline.py:296-332) to one attempt's answer."""
    parsed = parse_page_output(completion.text) if completion.finish_reason != FINISH_ERROR else None
    fm = parsed.front_matter if parsed is not None else None
    valid = _valid(completion, settings.max_context_tokens)
    page.final = completion
    if completion.finish_reason != FINISH_ERROR:
        page.kept = completion
    page.last = (completion, parsed) if fm is not None else None
    page.attempts[-1].update(
        parsed=fm is not None,
        valid=valid,
        rotation_correction=None if fm is None else fm.rotation_correction,
        is_rotation_valid=None if fm is None else fm.is_rotation_valid,
    )
    if fm is not None and valid and fm.is_rotation_valid:
        page.outcome = OUTCOME_ACCEPTED
        return
    if attempt == 0:
        if fm is not None and not fm.is_rotation_valid and settings.rotation_retry:
            page.path, page.rotation = "rotation", fm.rotation_correction % 360
        else:
            page.path = "retry"
    elif page.path == "rotation" and fm is not None:
        page.rotation = (page.rotation + fm.rotation_correction) % 360


def _record(
    page: _Page, mode: PipelineMode, *, image_sha256: str, model: str, backend: str, settings: str
) -> GenerationRecord:
    request = page.request
    fallback_source = fallback_error = None
    if page.outcome is None:
        page.outcome = (
            OUTCOME_LAST_VALID
            if page.last is not None and _valid(page.last[0], mode.settings.max_context_tokens)
            else OUTCOME_FALLBACK
        )
    if page.outcome == OUTCOME_FALLBACK:
        raw = page.kept.text if page.kept is not None else ""
        parsed = parse_page_output(raw)
        final = page.final
        fallback_source = mode.settings.fallback
        text, fallback_error = fallback_text(fallback_source, mode.pdf_paths.get(request.pdf), request.page)
        if page.kept is None:
            failure = FAILURE_ERROR
        elif page.kept.finish_reason == FINISH_LENGTH:
            failure = FAILURE_NO_EOS
        else:
            failure = FAILURE_INVALID
    else:
        final, parsed = page.last  # type: ignore[misc]
        raw, text, failure = final.text, parsed.text, None
    assert final is not None  # every page made at least one attempt
    last_rotation = page.attempts[-1]["rotation"]
    return GenerationRecord(
        pdf=request.pdf,
        page=request.page,
        repeat=request.repeat,
        image=request.image,
        image_sha256=image_sha256,
        model=model,
        backend=backend,
        prompt=PROMPT_NAME,
        settings=settings,
        text=text,
        raw=raw,
        front_matter=parsed.front_matter.to_dict() if parsed.front_matter else None,
        front_matter_error=parsed.error,
        finish_reason=final.finish_reason,
        prompt_tokens=final.prompt_tokens,
        completion_tokens=final.completion_tokens,
        seconds=round(sum(a["seconds"] for a in page.attempts), 4),
        attempts=page.attempts,
        failed=page.outcome == OUTCOME_FALLBACK,
        failure=failure,
        error=page.final.error if failure == FAILURE_ERROR and page.final is not None else None,
        pipeline={
            "outcome": page.outcome,
            "path": page.path,
            "rotation": last_rotation,
            "rotation_attempts": page.rotation_attempts,
            "fallback": page.outcome == OUTCOME_FALLBACK,
            "fallback_source": fallback_source,
            "fallback_error": fallback_error,
        },
    )


def decode_pipeline_batch(
    backend: GenerationBackend,
    requests: Sequence[PageRequest],
    temperatures: Sequence[float],
    max_new_tokens: int,
    top_p: float,
    seed_of: Callable[[PageRequest, int], int],
    mode: PipelineMode,
    *,
    image_hashes: Mapping[str, str],
    model: str,
    fingerprint: str,
) -> list[GenerationRecord]:
    """Run process_page's attempts for a batch of requests in lock step; one record per request.

    All unfinished pages of the batch make attempt k together (one backend call with the same
    temperature), each with its own image rotation. ``seed_of(request, attempt)`` gives the seed of
    a 1-based attempt number (``olmpipe.generate.decoding.request_seed``).
    """
    settings = mode.settings
    pages = [_Page(r) for r in requests]
    for attempt in range(settings.max_page_retries):
        pending = [p for p in pages if p.outcome is None]
        if not pending:
            break
        temperature = ladder_temperature(temperatures, attempt)
        live: list[tuple[_Page, PageRequest, Sampling]] = []
        for p in pending:
            params = Sampling(max_new_tokens, temperature, top_p, seed_of(p.request, attempt + 1))
            p.attempts.append(
                {
                    **asdict(Attempt(attempt + 1, temperature, params.seed, FINISH_ERROR, 0, 0, 0.0)),
                    "rotation": p.rotation,
                }
            )
            image = p.request.image
            if p.rotation:
                p.rotation_attempts += 1
                try:
                    image = rotate_image(p.request.image, p.rotation, mode.rotated_dir, p.request)
                except (OSError, ValueError) as exc:
                    error = f"cannot rotate page image {p.request.image} by {p.rotation}: {exc}"
                    p.attempts[-1]["error"] = error
                    _advance(p, Completion("", FINISH_ERROR, error=error), attempt, settings)
                    continue
            live.append((p, replace(p.request, image=image), params))
        if not live:
            continue
        completions = backend.generate([r for _, r, _ in live], [s for _, _, s in live])
        if len(completions) != len(live):
            raise GenerationError(
                f"backend {backend.name} returned {len(completions)} completions for {len(live)} requests"
            )
        for (p, _, _), completion in zip(live, completions, strict=True):
            p.attempts[-1].update(
                finish_reason=completion.finish_reason,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                seconds=round(completion.seconds, 4),
                error=completion.error,
            )
            _advance(p, completion, attempt, settings)
    records = [
        _record(
            p,
            mode,
            image_sha256=image_hashes.get(p.request.image, ""),
            model=model,
            backend=backend.name,
            settings=fingerprint,
        )
        for p in pages
    ]
    for r in records:
        if r.pipeline and (r.pipeline["rotation_attempts"] or r.pipeline["fallback"]):
            logger.info(
                "%s page %d repeat %d: %s after %d attempts (%d rotated, final rotation %d)",
                r.pdf,
                r.page,
                r.repeat,
                r.pipeline["outcome"],
                len(r.attempts),
                r.pipeline["rotation_attempts"],
                r.pipeline["rotation"],
            )
    return records


def pipeline_counts(records: Sequence[GenerationRecord]) -> dict[str, Any] | None:
    """Counts of the pipeline mode over ``records`` for ``summary.json``; None when no record used it.

    ``rotation_retried``: generations whose first answer asked for a rotation and that were retried
    on a rotated image; ``rotated``: generations whose kept answer came from a rotated image, by
    angle; ``last_valid``: kept the last valid answer although its rotation flag was false;
    ``fallback``: fell back (``fallback_errors``: of them, those whose fallback text failed);
    ``finished_on_attempt``: accepted generations by 1-based attempt.
    """
    used = [r for r in records if r.pipeline]
    if not used:
        return None
    by_angle: dict[str, int] = {}
    finished: dict[str, int] = {}
    for r in used:
        p = r.pipeline
        if p["outcome"] != OUTCOME_FALLBACK and p["rotation"]:
            by_angle[str(p["rotation"])] = by_angle.get(str(p["rotation"]), 0) + 1
        if p["outcome"] == OUTCOME_ACCEPTED:
            finished[str(len(r.attempts))] = finished.get(str(len(r.attempts)), 0) + 1
    return {
        "generations": len(used),
        "accepted": sum(r.pipeline["outcome"] == OUTCOME_ACCEPTED for r in used),
        "rotation_retried": sum(r.pipeline["path"] == "rotation" for r in used),
        "rotated": sum(by_angle.values()),
        "rotated_by_angle": dict(sorted(by_angle.items(), key=lambda kv: int(kv[0]))),
        "last_valid": sum(r.pipeline["outcome"] == OUTCOME_LAST_VALID for r in used),
        "fallback": sum(r.pipeline["fallback"] for r in used),
        "fallback_errors": sum(bool(r.pipeline["fallback_error"]) for r in used),
        "finished_on_attempt": dict(sorted(finished.items(), key=lambda kv: int(kv[0]))),
    }

"""Robust decoding on top of any backend: repeats, the dynamic temperature ladder, failed pages.

olmOCR 2 decodes each page at a low temperature first and, when a generation ends without EOS (a
repetition loop that runs into the token limit), tries again at the next temperature of a ladder
(0.1 up to 0.8); every attempt is kept in the record. A page whose attempts all end without EOS,
or all fail in the backend, is a *failed page*: it is recorded (``failed: true``), never dropped,
and its candidate text is the last text the model produced (empty when none).

Work is handed to the backend in batches of ``batch_size`` requests. All requests of a batch go
through ladder step 1 together, the unfinished ones through step 2 together, and so on, so a
batched engine (vLLM, padded transformers ``generate``) always sees full batches of equal
sampling parameters.

With ``generation.pipeline.enabled`` the batches go through olmOCR's pipeline logic instead
(:mod:`olmpipe.generate.pipeline`: ladder by attempt, rotation retry, fallback pages); with it off
nothing here changes, records and fingerprints included.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from olmpipe.generate.base import (
    FAILURE_ERROR,
    FAILURE_NO_EOS,
    FINISH_ERROR,
    FINISH_STOP,
    Attempt,
    Completion,
    GenerationBackend,
    GenerationError,
    PageRequest,
    Sampling,
)
from olmpipe.generate.pipeline import PipelineMode, decode_pipeline_batch
from olmpipe.prompts import PROMPT_NAME, parse_page_output
from olmpipe.records.generations import GenerationRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodingSettings:
    """The decoding knobs of the ``generation`` config section that apply to every backend."""

    max_new_tokens: int
    temperatures: tuple[float, ...]
    top_p: float
    seed: int
    repeats: int
    batch_size: int
    #: TRL's other sampling knobs (off by default: the ``generation`` section never sets them).
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ValueError("generation.temperatures: the ladder needs at least one temperature")
        if any(t < 0 for t in self.temperatures):
            raise ValueError(f"generation.temperatures: negative temperature in {list(self.temperatures)}")
        if self.repeats < 1 or self.batch_size < 1 or self.max_new_tokens < 1:
            raise ValueError("generation: repeats, batch_size and max_new_tokens must be at least 1")

    @classmethod
    def from_config(cls, generation: Mapping[str, Any]) -> DecodingSettings:
        """Build from the validated ``generation`` section (``cfg["generation"]``)."""
        return cls(
            max_new_tokens=int(generation["max_new_tokens"]),
            temperatures=tuple(float(t) for t in generation["temperatures"]),
            top_p=float(generation["top_p"]),
            seed=int(generation["seed"]),
            repeats=int(generation["repeats"]),
            batch_size=int(generation["batch_size"]),
        )

    def fingerprint_fields(self) -> dict[str, Any]:
        """The settings that change what is generated (batch size and repeats do not change a record).

        ``top_k``, ``min_p`` and ``repetition_penalty`` enter only when on, so settings that never
        set them keep the fingerprint they had before these knobs existed.
        """
        data = asdict(self)
        data.pop("batch_size")
        data.pop("repeats")
        for name, off in (("top_k", 0), ("min_p", 0.0), ("repetition_penalty", 1.0)):
            if data[name] == off:
                data.pop(name)
        data["temperatures"] = list(self.temperatures)
        return data


def request_seed(base_seed: int, key: tuple[str, int, int], attempt: int) -> int:
    """A stable per-request seed: the same (pdf, page, repeat, attempt) always samples the same way.

    Different repeats of a page get different seeds, so repeats are independent samples, and a
    resumed run draws the same seeds as an uninterrupted one.
    """
    pdf, page, repeat = key
    mixed = zlib.crc32(f"{pdf}\0{page}\0{repeat}\0{attempt}".encode())
    return (base_seed * 1_000_003 + mixed) % (2**31 - 1)


def decoding_fingerprint(
    settings: DecodingSettings, backend: Mapping[str, Any], extra: Mapping[str, Any]
) -> str:
    """Short hash of what decides a generation's text: the decoding settings, the backend and model
    identity, the prompt, plus ``extra`` (the caller's code version and mode); journaled work that a
    resumed run reuses must carry the same (:func:`olmpipe.evaluate.engine.generation_fingerprint`)."""
    payload = {
        "decoding": settings.fingerprint_fields(),
        "backend": dict(backend),
        "prompt": PROMPT_NAME,
        **dict(extra),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_requests(pages: Sequence[Mapping[str, Any]], repeats: int) -> list[PageRequest]:
    """One request per page entry (``pdf``, ``page``, ``image``) and repeat 1..``repeats``, page-major."""
    return [
        PageRequest(pdf=str(p["pdf"]), page=int(p["page"]), repeat=r, image=str(p["image"]))
        for p in pages
        for r in range(1, repeats + 1)
    ]


def _record(
    request: PageRequest,
    attempts: list[Attempt],
    kept: Completion | None,
    last: Completion,
    *,
    image_sha256: str,
    model: str,
    backend: str,
    settings: str,
) -> GenerationRecord:
    final = kept if kept is not None else last
    raw = kept.text if kept is not None else ""
    parsed = parse_page_output(raw)
    if final.finish_reason == FINISH_STOP:
        failed, failure = False, None
    elif kept is not None:
        failed, failure = True, FAILURE_NO_EOS
    else:
        failed, failure = True, FAILURE_ERROR
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
        text=parsed.text,
        raw=raw,
        front_matter=parsed.front_matter.to_dict() if parsed.front_matter else None,
        front_matter_error=parsed.error,
        finish_reason=final.finish_reason,
        prompt_tokens=final.prompt_tokens,
        completion_tokens=final.completion_tokens,
        seconds=round(sum(a.seconds for a in attempts), 4),
        attempts=[asdict(a) for a in attempts],
        failed=failed,
        failure=failure,
        error=last.error if failure == FAILURE_ERROR else None,
    )


def decode_batch(
    backend: GenerationBackend,
    requests: Sequence[PageRequest],
    settings: DecodingSettings,
    *,
    image_hashes: Mapping[str, str],
    model: str,
    fingerprint: str,
) -> list[GenerationRecord]:
    """Run the temperature ladder on one batch of requests and return one record per request."""
    n = len(requests)
    attempts: list[list[Attempt]] = [[] for _ in range(n)]
    kept: list[Completion | None] = [None] * n  # latest completion that produced text
    last: list[Completion | None] = [None] * n
    pending = list(range(n))
    for step, temperature in enumerate(settings.temperatures, start=1):
        if not pending:
            break
        sampling = [
            Sampling(
                settings.max_new_tokens,
                temperature,
                settings.top_p,
                request_seed(settings.seed, requests[i].key, step),
                top_k=settings.top_k,
                min_p=settings.min_p,
                repetition_penalty=settings.repetition_penalty,
            )
            for i in pending
        ]
        completions = backend.generate([requests[i] for i in pending], sampling)
        if len(completions) != len(pending):
            raise GenerationError(
                f"backend {backend.name} returned {len(completions)} completions for {len(pending)} requests"
            )
        still = []
        for i, completion, params in zip(pending, completions, sampling, strict=True):
            attempts[i].append(
                Attempt(
                    attempt=step,
                    temperature=temperature,
                    seed=params.seed,
                    finish_reason=completion.finish_reason,
                    prompt_tokens=completion.prompt_tokens,
                    completion_tokens=completion.completion_tokens,
                    seconds=round(completion.seconds, 4),
                    error=completion.error,
                )
            )
            last[i] = completion
            if completion.finish_reason != FINISH_ERROR:
                kept[i] = completion
            if completion.finish_reason != FINISH_STOP:
                still.append(i)
        if still and step < len(settings.temperatures):
            logger.debug(
                "%d of %d requests ended without EOS at temperature %s; retrying hotter",
                len(still),
                len(pending),
                temperature,
            )
        pending = still
    return [
        _record(
            requests[i],
            attempts[i],
            kept[i],
            last[i],
            image_sha256=image_hashes.get(requests[i].image, ""),
            model=model,
            backend=backend.name,
            settings=fingerprint,
        )
        for i in range(n)
    ]


def iter_generate(
    backend: GenerationBackend,
    requests: Sequence[PageRequest],
    settings: DecodingSettings,
    *,
    image_hashes: Mapping[str, str],
    model: str,
    fingerprint: str,
    pipeline: PipelineMode | None = None,
) -> Iterator[list[GenerationRecord]]:
    """Decode ``requests`` batch by batch, yielding each batch's records as soon as they exist.

    Callers append the records to their journal after every batch, so an interrupted run loses at
    most one batch of work. ``pipeline`` with ``settings.enabled`` decodes with olmOCR's pipeline
    logic (:func:`olmpipe.generate.pipeline.decode_pipeline_batch`) instead of the plain ladder.
    """
    batches = [
        requests[start : start + settings.batch_size]
        for start in range(0, len(requests), settings.batch_size)
    ]
    for index, batch in enumerate(batches):
        if index + 1 < len(batches):
            backend.prefetch(batches[index + 1])
        t0 = time.perf_counter()
        if pipeline is not None and pipeline.settings.enabled:
            records = decode_pipeline_batch(
                backend,
                batch,
                settings.temperatures,
                settings.max_new_tokens,
                settings.top_p,
                lambda request, attempt: request_seed(settings.seed, request.key, attempt),
                pipeline,
                image_hashes=image_hashes,
                model=model,
                fingerprint=fingerprint,
            )
        else:
            records = decode_batch(
                backend, batch, settings, image_hashes=image_hashes, model=model, fingerprint=fingerprint
            )
        logger.debug("batch of %d requests decoded in %.2fs", len(batch), time.perf_counter() - t0)
        yield records

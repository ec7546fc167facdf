"""The interface every generation backend implements, and the records all of them produce.

A backend turns a batch of :class:`PageRequest` (one page image + one repeat index) and one
:class:`Sampling` per request into one :class:`Completion` each: the raw answer text, why it
stopped (``"stop"`` when the model ended it with EOS, ``"length"`` when it ran into the token limit,
``"error"`` when the backend failed) and token counts. Everything above that (the dynamic
temperature ladder, repeats, front matter parsing, failed pages) lives in
:mod:`olmpipe.generate.decoding`, so the three backends produce identical
:class:`GenerationRecord` lines in ``generations.jsonl``.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

#: Values of :attr:`Completion.finish_reason`.
FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_ERROR = "error"
FINISH_REASONS = (FINISH_STOP, FINISH_LENGTH, FINISH_ERROR)
#: Values of :attr:`GenerationRecord.failure` of a failed page: no EOS in any attempt, the backend
#: failed, or (pipeline mode) every answer ended but none parsed.
FAILURE_NO_EOS = "no_eos"
FAILURE_ERROR = "error"
FAILURE_INVALID = "invalid"


class GenerationError(RuntimeError):
    """A generation run that cannot produce trustworthy results (e.g. the backend is unreachable)."""


@dataclass(frozen=True)
class PageRequest:
    """One generation to make: page ``page`` (1-based) of ``pdf`` (path under ``pdfs/``), repeat ``repeat``.

    Pages and repeats are 1-based.

    ``image`` is the path of the rasterized page (PNG); backends read it, never re-render the PDF.
    """

    pdf: str
    page: int
    repeat: int
    image: str

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.pdf, self.page, self.repeat)


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one attempt. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int


@dataclass(frozen=True)
class Completion:
    """What a backend returns for one request."""

    text: str
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}")


@dataclass(frozen=True)
class Attempt:
    """One try at a page, kept in the record whatever its outcome (the ladder's history)."""

    attempt: int
    temperature: float
    seed: int
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    error: str | None = None


@dataclass
class GenerationRecord:
    """One line of ``generations.jsonl``: the final answer for (pdf, page, repeat) and how it was obtained.

    ``text`` is the page text (front matter removed), the content of the candidate ``.md`` file;
    ``raw`` the model's full answer. ``failed`` is True when no attempt ended with EOS;
    ``failure`` then says why: ``"no_eos"`` (every attempt hit the token limit; the text of the
    last one is kept) or ``"error"`` (the last attempt failed in the backend; ``error`` says how);
    the pipeline mode's fallback pages may also be ``"invalid"`` (answers ended with EOS but none
    was usable).
    ``settings`` is the fingerprint of the generation settings, used to resume only compatible work.
    ``pipeline`` is set only in the pipeline-compatible mode (:mod:`olmpipe.generate.pipeline`):
    outcome, rotation attempts, applied rotation, ``fallback``; without it the line is written
    exactly as before the mode existed.
    """

    pdf: str
    page: int
    repeat: int
    image: str
    image_sha256: str
    model: str
    backend: str
    prompt: str
    settings: str
    text: str
    raw: str
    front_matter: dict[str, Any] | None
    front_matter_error: str | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    attempts: list[dict[str, Any]] = field(default_factory=list)
    failed: bool = False
    failure: str | None = None
    error: str | None = None
    pipeline: dict[str, Any] | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.pdf, self.page, self.repeat)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["pipeline"] is None:
            del data["pipeline"]  # records of the plain mode keep their original keys
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GenerationRecord:
        """Rebuild a record from a ``generations.jsonl`` line; ``ValueError`` names missing fields."""
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise ValueError(f"generation record misses {', '.join(missing)}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class GenerationBackend(abc.ABC):
    """A model that answers page requests. Subclasses: transformers, vLLM, OpenAI-compatible server.

    ``model_seconds`` accumulates the wall time spent inside the model (``generate`` calls or HTTP
    round trips), so callers can report the share of time spent elsewhere (preprocessing, parsing,
    I/O).
    """

    name: str = "base"

    def __init__(self) -> None:
        self.model_seconds = 0.0

    @abc.abstractmethod
    def generate(self, requests: Sequence[PageRequest], sampling: Sequence[Sampling]) -> list[Completion]:
        """Answer every request with its own sampling parameters; one completion per request, same order.

        Failures of single requests are returned as ``Completion(finish_reason="error", error=...)``;
        exceptions are for failures that make the whole backend unusable.
        """

    def prefetch(self, requests: Sequence[PageRequest]) -> None:
        """Hint: ``requests`` come next. Backends may start preparing them (the default does nothing)."""

    def close(self) -> None:
        """Release the model / engine / connections; the backend is unusable afterwards."""


def file_sha256(path: str, length: int = 16) -> str:
    """Short sha256 of a file's bytes (identifies the page image a generation was made from)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:length]


def check_lengths(requests: Sequence[PageRequest], sampling: Sequence[Sampling]) -> None:
    if len(requests) != len(sampling):
        raise ValueError(f"{len(requests)} requests but {len(sampling)} sampling parameters")

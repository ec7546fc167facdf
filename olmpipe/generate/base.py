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
from collections.abc import Sequence
from dataclasses import dataclass

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
    """Sampling parameters of one attempt. ``temperature == 0`` means greedy decoding.

    ``top_k`` (0: off), ``min_p`` (0: off) and ``repetition_penalty`` (1: off) are TRL's other
    sampling knobs (``GRPOConfig``), used when the difficulty stage samples like the trainer; a
    backend passes them on only when they are not off, so every other request is sent exactly as
    before they existed.
    """

    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def extra_knobs(self) -> dict[str, float | int]:
        """The knobs beyond temperature and top_p that are on, by their TRL/vLLM/transformers name."""
        out: dict[str, float | int] = {}
        if self.top_k:
            out["top_k"] = int(self.top_k)
        if self.min_p:
            out["min_p"] = float(self.min_p)
        if self.repetition_penalty != 1.0:
            out["repetition_penalty"] = float(self.repetition_penalty)
        return out


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


def check_lengths(requests: Sequence[PageRequest], sampling: Sequence[Sampling]) -> None:
    if len(requests) != len(sampling):
        raise ValueError(f"{len(requests)} requests but {len(sampling)} sampling parameters")

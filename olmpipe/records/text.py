"""Completion to text: the one reduction of what a model or TRL hands over to the string that is scored.

TRL passes ``completions`` as plain strings (standard prompts) or as lists of assistant messages
(conversational prompts, the case of the multimodal OCR dataset), whose ``content`` is a string or a
list of ``{"type": "text", "text": ...}`` parts; user code may pass ``None`` or bytes. The rewards,
the scorer (:func:`olmpipe.bench.normalize.coerce_text`) and the training run's completion tables
all read completions through :func:`completion_text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def completion_text(completion: Any) -> str | None:
    """The text of one completion, or None when there is none to score.

    >>> completion_text([{"role": "assistant", "content": "hello"}])
    'hello'
    >>> completion_text("plain") , completion_text(None)
    ('plain', None)
    """
    if completion is None:
        return None
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (bytes, bytearray)):
        return bytes(completion).decode("utf-8", errors="replace")
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        parts = [_content_text(m.get("content")) if isinstance(m, dict) else completion_text(m) for m in completion]
        texts = [p for p in parts if p is not None]
        return "".join(texts) if texts else None
    return None


def _content_text(content: Any) -> str | None:
    """Text of a message ``content``: a string or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(texts)
    return None

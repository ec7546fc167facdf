"""Turning what TRL hands a reward function into the text that gets scored.

TRL passes ``completions`` as plain strings (standard prompts) or as lists of assistant messages
(conversational prompts, the case of the multimodal OCR dataset); a reward must also survive
``None`` and bytes from user code. :func:`completion_text` reduces all of these to one string, and
:func:`scored_text` applies the configured choice of which part of an answer the unit tests see.

Which text is scored (``rewards.score_text``):

- ``full``: the whole answer, YAML front matter included. This is what olmOCR's own GRPO reward
  (``olmocr.train.grpo_train.olmocr_bench_reward``) scores, so the reward values match olmOCR 2's
  recipe; a model is then also judged on whether its front matter gets in the way of ``absent`` or
  ``order`` tests.
- ``page_text``: only the page text below the front matter (:func:`olmpipe.prompts.parse_page_output`),
  which is what olmOCR-Bench scores when it evaluates the pipeline's markdown files.
"""

from __future__ import annotations

from typing import Any

from olmpipe.records.text import completion_text

__all__ = ["SCORE_TEXT_CHOICES", "column", "completion_text", "scored_text"]

SCORE_TEXT_CHOICES = ("full", "page_text")


def scored_text(text: str, score_text: str) -> str:
    """The part of an answer the unit tests score, per ``rewards.score_text`` (see the module docstring)."""
    if score_text == "full":
        return text
    if score_text == "page_text":
        from olmpipe.prompts import parse_page_output

        return parse_page_output(text).text
    raise ValueError(f"score_text must be one of {', '.join(SCORE_TEXT_CHOICES)}, got {score_text!r}")


def column(kwargs: dict[str, Any], name: str, n: int) -> list[Any]:
    """Dataset column ``name`` from a reward call's kwargs, as a list of length ``n`` (None-filled).

    Rewards used from a user's own TRL script may run on datasets without the column; they then
    see None for every row instead of a KeyError.
    """
    values = kwargs.get(name)
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) < n:
        values += [None] * (n - len(values))
    return values[:n]

"""Rewards on the form of an answer: it ends with EOS, and its YAML front matter parses.

Both follow TRL's reward contract (keyword arguments, ``**kwargs``, one ``float | None`` per
completion), never raise into the trainer, and are picklable; their ``__name__`` ends in
``_reward`` (TRL logs each reward under that name).

>>> reward = EosReward(eos_token_ids=[7])
>>> reward(prompts=[None, None], completions=["a", "b"], completion_ids=[[3, 7], [3, 4]])
[1.0, 0.0]
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable
from typing import Any

from olmpipe.rewards.text import column, completion_text

logger = logging.getLogger(__name__)

#: olmOCR 2's front matter reward (``olmocr/train/grpo_train.py:479-575`` at v0.4.27): 0.5 when the
#: answer's front matter parses, plus 0.1 per field equal to the reference answer's.
FRONT_MATTER_PARSE_REWARD = 0.5
FRONT_MATTER_FIELD_BONUS = 0.1


def _last_token(seq: Any) -> int | None:
    """The last token id of one completion's ids (None when it is empty).

    Raises ``TypeError`` when ``seq`` is not a sequence of integers at its end: a string, a number,
    a float or string token. Integer-like objects (numpy integers, 0-d integer tensors) pass through
    ``operator.index``. Only the last token is checked: it is the only one the reward reads.
    """
    if isinstance(seq, (str, bytes, bytearray)):
        raise TypeError(f"token ids are a {type(seq).__name__}, not a sequence of integers")
    seq = list(seq)  # TypeError for a bare number or None-like object
    if not seq:
        return None
    try:
        return operator.index(seq[-1])
    except TypeError:
        raise TypeError(f"last token id {seq[-1]!r} is a {type(seq[-1]).__name__}, not an integer") from None


class EosReward:
    """1.0 when a completion's last token is an end-of-sequence token, else 0.0.

    A completion cut by ``max_completion_length`` ends without EOS; rewarding EOS teaches the model
    to finish pages instead of looping until the token limit. Build it from the processor's
    tokenizer with :meth:`for_tokenizer`. As in olmOCR (``grpo_train.py:670-707``) an empty
    completion scores 0.0.

    Completions without token ids score None (not applicable). So do completions whose ids are
    not integers (a string, a float token, a bare number): TRL leaves a None out of the weighted
    reward sum, so a malformed row neither rewards nor punishes the model. Each call logs them
    with a warning, counts them in the ``eos/errors`` metric (through TRL's ``log_metric``) and
    reports each through ``log_error(index, reason)`` when given (see :mod:`olmpipe.job.health`).
    """

    def __init__(self, eos_token_ids: Iterable[int]):
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        if not self.eos_token_ids:
            raise ValueError("EosReward needs at least one EOS token id")
        self.__name__ = "eos_reward"

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, extra_ids: Iterable[int] = ()) -> EosReward:
        """The reward for ``tokenizer`` (a tokenizer or a processor holding one) plus ``extra_ids``."""
        tok = getattr(tokenizer, "tokenizer", tokenizer)
        ids = {tok.eos_token_id, *extra_ids} - {None}
        return cls(ids)

    def __call__(
        self,
        prompts=None,
        completions=None,
        completion_ids=None,
        log_metric: Callable[[str, float], None] | None = None,
        log_error: Callable[[int, str], None] | None = None,
        **kwargs,
    ) -> list[float | None]:
        n = len(completions) if completions is not None else 0
        errors: list[str] = []
        try:
            ids = list(completion_ids) if completion_ids is not None else []
        except TypeError:
            errors.append(f"completion_ids is a {type(completion_ids).__name__}, not a list per completion")
            ids = []
            if log_error is not None:
                for i in range(n):
                    log_error(i, errors[0])
        n = max(n, len(ids))
        ids = column({"completion_ids": ids or None}, "completion_ids", n)
        out: list[float | None] = []
        for i, seq in enumerate(ids):
            if seq is None:
                out.append(None)
                continue
            try:
                last = _last_token(seq)
            except TypeError as exc:
                errors.append(f"completion {i}: {exc}")
                if log_error is not None:
                    log_error(i, str(exc))
                out.append(None)
                continue
            out.append(1.0 if last is not None and last in self.eos_token_ids else 0.0)
        if errors:
            logger.warning("eos_reward: %d bad completion_ids of %d scored None; first: %s",
                           len(errors), n, errors[0])
        if log_metric is not None:
            log_metric("eos/errors", float(len(errors)))
        return out

    def __repr__(self) -> str:
        return f"EosReward(eos_token_ids={sorted(self.eos_token_ids)})"


def front_matter_reward(prompts=None, completions=None, reference=None, **kwargs) -> list[float | None]:
    """0.5 when the answer's front matter parses, plus 0.1 per field equal to the reference's.

    olmOCR 2's ``reward_front_matter`` (``olmocr/train/grpo_train.py:479-575`` at v0.4.27), with
    the same parser (:func:`olmpipe.prompts.parse_page_output` accepts exactly what olmOCR's
    ``FrontMatterParser`` accepts and reads the same values): an answer olmOCR cannot parse scores
    0.0; a parsed one 0.5, plus 0.1 for each of ``primary_language``, ``is_rotation_valid``,
    ``rotation_correction``, ``is_table`` and ``is_diagram`` equal (``==``) to the reference's.

    ``reference`` (a dataset column, olmOCR's ``claude_original``; filled from
    ``rewards.reference_candidate``) holds a reference answer per row. Rows without one, or whose
    reference does not parse, get no field bonus (0.5 at most), as in olmOCR; unparsable references
    are counted in a warning. The reward is ``0.5 + 0.1 * matches``, exactly 0.5, 0.6 ... 1.0:
    olmOCR adds 0.1 once per match and gets 0.7999999999999999 where this returns 0.8. ``docs/front_matter.md`` lists the reference's
    quirks this keeps (``primary_language: no`` reads as null, like ``null``).

    >>> ok = "---\\nprimary_language: en\\nis_rotation_valid: True\\nrotation_correction: 0\\n" \\
    ...      "is_table: False\\nis_diagram: False\\n---\\nHello"
    >>> front_matter_reward(completions=[ok, "Hello", None], reference=[ok, None, None])
    [1.0, 0.0, 0.0]
    """
    from olmpipe.prompts import FRONT_MATTER_FIELDS, FrontMatter, parse_page_output

    completions = list(completions or [])
    try:
        refs = column({"reference": reference}, "reference", len(completions))
    except TypeError:
        logger.warning("front_matter_reward: reference column is a %s, not a list; no field bonus",
                       type(reference).__name__)
        refs = [None] * len(completions)
    ref_fronts: dict[str, FrontMatter | None] = {}  # the G completions of a page share one reference
    bad_refs = 0
    out: list[float | None] = []
    for completion, ref in zip(completions, refs, strict=True):
        text = completion_text(completion)
        parsed = parse_page_output(text) if text is not None else None
        if parsed is None or parsed.front_matter is None:
            out.append(0.0)
            continue
        reward = FRONT_MATTER_PARSE_REWARD
        if isinstance(ref, str) and ref:
            if ref not in ref_fronts:
                ref_fronts[ref] = parse_page_output(ref).front_matter
            ref_fm = ref_fronts[ref]
            if ref_fm is None:
                bad_refs += 1
            else:
                matches = sum(getattr(parsed.front_matter, f) == getattr(ref_fm, f) for f in FRONT_MATTER_FIELDS)
                reward += FRONT_MATTER_FIELD_BONUS * matches
        out.append(reward)
    if bad_refs:
        logger.warning("front_matter_reward: the reference answer of %d of %d completions has no front matter "
                       "olmOCR's parser accepts; they get no field bonus", bad_refs, len(completions))
    return out

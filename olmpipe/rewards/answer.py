"""Rewards on the form of an answer: it ends with EOS, and its YAML front matter parses.

Both follow TRL's reward contract (keyword arguments, ``**kwargs``, one ``float | None`` per
completion) and are picklable callable objects whose ``__name__`` ends in ``_reward`` (TRL logs
each reward under that name).

>>> reward = EosReward(eos_token_ids=[7])
>>> reward(prompts=[None, None], completions=["a", "b"], completion_ids=[[3, 7], [3, 4]])
[1.0, 0.0]
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from olmpipe.rewards.text import column, completion_text

logger = logging.getLogger(__name__)

#: Front matter fields compared with a reference answer, 0.1 each (olmOCR 2's front matter reward).
FRONT_MATTER_FIELD_BONUS = 0.1
FRONT_MATTER_PARSE_REWARD = 0.5


class EosReward:
    """1.0 when a completion's last token is an end-of-sequence token, else 0.0.

    A completion cut by ``max_completion_length`` ends without EOS; rewarding EOS teaches the model
    to finish pages instead of looping until the token limit. Build it from the processor's
    tokenizer with :meth:`for_tokenizer`. Completions without token ids score None (not applicable).
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

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float | None]:
        n = len(completion_ids if completion_ids is not None else completions or [])
        ids = column({"completion_ids": completion_ids}, "completion_ids", n)
        out: list[float | None] = []
        for seq in ids:
            if seq is None:
                out.append(None)
            else:
                seq = list(seq)
                out.append(1.0 if seq and int(seq[-1]) in self.eos_token_ids else 0.0)
        return out

    def __repr__(self) -> str:
        return f"EosReward(eos_token_ids={sorted(self.eos_token_ids)})"


def front_matter_reward(prompts=None, completions=None, reference=None, **kwargs) -> list[float | None]:
    """0.5 when the answer's front matter parses, plus 0.1 per field equal to the reference's.

    ``reference`` (a dataset column, optional) holds a reference answer with front matter per row;
    rows without one (or whose reference front matter does not parse) get no field bonus, so the
    reward is 0.5 at most there. With all five fields matching the reward is 1.0. Parsing is
    :func:`olmpipe.prompts.parse_page_output`, the same parser generation uses.

    >>> ok = "---\\nprimary_language: en\\nis_rotation_valid: True\\nrotation_correction: 0\\n" \\
    ...      "is_table: False\\nis_diagram: False\\n---\\nHello"
    >>> front_matter_reward(completions=[ok, "Hello", None], reference=[ok, None, None])
    [1.0, 0.0, 0.0]
    """
    from olmpipe.prompts import FRONT_MATTER_FIELDS, parse_page_output

    completions = list(completions or [])
    refs = column({"reference": reference}, "reference", len(completions))
    out: list[float | None] = []
    for completion, ref in zip(completions, refs, strict=True):
        text = completion_text(completion)
        parsed = parse_page_output(text) if text is not None else None
        if parsed is None or parsed.front_matter is None:
            out.append(0.0)
            continue
        reward = FRONT_MATTER_PARSE_REWARD
        ref_fm = parse_page_output(ref).front_matter if isinstance(ref, str) else None
        if ref_fm is not None:
            matches = sum(
                getattr(parsed.front_matter, f) == getattr(ref_fm, f) for f in FRONT_MATTER_FIELDS
            )
            reward += FRONT_MATTER_FIELD_BONUS * matches
        out.append(round(reward, 10))
    return out

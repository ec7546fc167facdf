"""Repetition-loop detection of the ``baseline`` test (olmocr ``repeatdetect.RepeatDetector``).

For each n-gram size ``n`` in ``1..max_n`` the reference counts how many times the text's last
``n`` characters (after collapsing whitespace runs to one space) repeat back to back at the end.
It walks backwards one n-gram at a time in Python; here the count is found with an exponential
then binary search over ``str.endswith``, so a 1 MB repetition loop costs milliseconds.
"""

from __future__ import annotations

import re

_WS = re.compile(r"\s+")


def _tail_repeats(text: str, size: int) -> int:
    """Largest k such that ``text`` ends with k back-to-back copies of its last ``size`` chars."""
    if len(text) < size:
        return 0
    target = text[-size:]
    limit = len(text) // size
    lo, hi = 1, 2  # text ends with target * lo; search for the first failing hi
    while hi <= limit and text.endswith(target * hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:  # invariant: ends with target*lo, not with target*hi (or hi > limit)
        mid = (lo + hi) // 2
        if text.endswith(target * mid):
            lo = mid
        else:
            hi = mid
    return lo


def ngram_repeats(text: str, max_n: int = 5) -> list[int]:
    """Trailing repeat counts for n-gram sizes 1..max_n (index 0 is size 1), as the reference.

    >>> ngram_repeats("abcabcabc", 3)
    [1, 1, 3]
    """
    if not text:
        return [0] * max_n
    text = _WS.sub(" ", text)
    return [_tail_repeats(text, n) for n in range(1, max_n + 1)]

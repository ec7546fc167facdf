"""Fuzzy substring search for ``order`` tests: fuzzysearch's answer, computed on small windows.

The reference ``order`` test (olmocr 0.4.27) calls ``fuzzysearch.find_near_matches(pattern, text,
max_l_dist=k)`` twice on the whole page and passes iff the first reported ``before`` start is below
the last reported ``after`` start. fuzzysearch's Levenshtein search is pure Python and costs
milliseconds per call on a page; a GRPO group scores 28 near-identical pages.

:func:`first_start` / :func:`last_start` return that first / last start exactly, by running
fuzzysearch itself on small windows of the text instead of the whole page, and remembering the
answer per window (a bounded cache of a pure function: near-identical completions share windows).
:func:`order_failure` gives the verdict and searches only the windows whose outcome it depends on:
exact occurrences (``str.find``) and window positions bound both starts, and often decide alone.

Why a window gives the same matches (``m = len(pattern)``, ``g = m // (k + 1) >= 3``, i.e.
fuzzysearch's n-gram search):

- fuzzysearch finds every exact occurrence ("hit") of each of the pattern's n-grams
  ``pattern[s:s+g]`` (``s = 0, g, 2g, ...``) inside a range that depends only on ``s``, ``k``, ``m``
  and ``len(text)``; each hit at index ``i`` has the anchor ``a = i - s`` and yields at most one
  raw match, computed from ``text[a - k : a + m + k]`` only (its expansion windows), lying there.
- Hits are grouped into clusters whose intervals ``[a - k, a + m + k)`` (clipped to the text)
  overlap. A cluster's window (the union of its intervals) contains every one of its hits and their
  expansion windows; any hit fuzzysearch finds inside the window is a hit of the whole text whose
  interval meets the window, hence a member of the cluster; and the range conditions on the window
  imply those on the whole text. So ``find_near_matches`` on the window computes exactly the
  cluster's raw matches (shifted by the window's offset).
- Raw matches of different clusters lie in disjoint windows, so they never overlap, and
  fuzzysearch's consolidation (one best match per group of overlapping matches) acts per cluster.

Hence the first start of the page is the first start of the leftmost cluster that has a match,
and the last start the last start of the rightmost one. Patterns with ``g < 3`` (fuzzysearch's
other algorithm) are searched on the whole text. Ties inside a group (several matches with the same
distance and length) are broken by fuzzysearch's set order, which depends on the string hash seed,
in the reference as here; ``tests/test_bench_nearmatch.py`` checks the equality on random strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from math import inf

from fuzzysearch import find_near_matches

MIN_NGRAM = 3  # fuzzysearch uses its n-gram search when len(pattern) // (k + 1) >= 3
CACHE_SIZE = 4096  # windows remembered per process
MAX_CACHED_WINDOW = 4096  # longer windows (hostile repetitions) are searched uncached: memory stays bounded


def _search(pattern: str, window: str, max_diffs: int) -> tuple[int, ...]:
    """Sorted starts of fuzzysearch's consolidated matches of ``pattern`` in ``window``."""
    return tuple(m.start for m in find_near_matches(pattern, window, max_l_dist=max_diffs))


_cached_search = lru_cache(maxsize=CACHE_SIZE)(_search)


def _window_starts(pattern: str, window: str, max_diffs: int) -> tuple[int, ...]:
    """:func:`_search`, remembered for windows of at most :data:`MAX_CACHED_WINDOW` characters."""
    if len(window) > MAX_CACHED_WINDOW:
        return _search(pattern, window, max_diffs)
    return _cached_search(pattern, window, max_diffs)


def _anchors(pattern: str, text: str, max_diffs: int) -> list[int]:
    """Sorted anchors (hit index minus n-gram offset) of the n-gram hits fuzzysearch expands."""
    m, n = len(pattern), len(text)
    g = m // (max_diffs + 1)
    anchors: set[int] = set()
    for s in range(0, m - g + 1, g):
        ngram = pattern[s:s + g]
        # fuzzysearch's search range for this n-gram (clamped as its search_exact clamps it)
        lo = min(max(0, s - max_diffs), n)
        hi = min(max(n - m + s + g + max_diffs, lo), n)
        i = text.find(ngram, lo, hi)
        while i >= 0:
            anchors.add(i - s)
            i = text.find(ngram, i + 1, hi)
    return sorted(anchors)


def _clusters(pattern: str, text: str, max_diffs: int) -> list[tuple[int, int]]:
    """Windows ``(lo, hi)`` of the clusters of hits, left to right (see the module docstring)."""
    m, n, k = len(pattern), len(text), max_diffs
    windows: list[tuple[int, int]] = []
    for a in _anchors(pattern, text, k):
        lo, hi = max(0, a - k), min(n, a + m + k)
        if windows and lo < windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], hi))
        else:
            windows.append((lo, hi))
    return windows


def _cluster_starts(pattern: str, text: str, max_diffs: int, reverse: bool) -> Iterator[tuple[int, ...]]:
    """Absolute match starts of each cluster, leftmost (or rightmost) cluster first."""
    windows = _clusters(pattern, text, max_diffs)
    for lo, hi in reversed(windows) if reverse else windows:
        starts = _window_starts(pattern, text[lo:hi], max_diffs)
        if starts:
            yield tuple(lo + s for s in starts)


def _whole_text(pattern: str, text: str, max_diffs: int) -> tuple[int, ...]:
    return tuple(m.start for m in find_near_matches(pattern, text, max_l_dist=max_diffs))


def all_starts(pattern: str, text: str, max_diffs: int) -> tuple[int, ...]:
    """Starts of all of fuzzysearch's consolidated matches, cluster by cluster (for checking)."""
    if max_diffs == 0 or len(pattern) // (max_diffs + 1) < MIN_NGRAM:
        return _whole_text(pattern, text, max_diffs)
    return tuple(s for starts in _cluster_starts(pattern, text, max_diffs, reverse=False) for s in starts)


def first_start(pattern: str, text: str, max_diffs: int) -> int | None:
    """``min(m.start for m in find_near_matches(pattern, text, max_l_dist=max_diffs))`` or None.

    >>> first_start("quick brown", "the quikc brown fox, a quick brown dog", 2)
    4
    """
    if max_diffs == 0:
        i = text.find(pattern)
        return None if i < 0 else i
    if len(pattern) // (max_diffs + 1) < MIN_NGRAM:
        starts = _whole_text(pattern, text, max_diffs)
        return starts[0] if starts else None
    for starts in _cluster_starts(pattern, text, max_diffs, reverse=False):
        return starts[0]
    return None


def last_start(pattern: str, text: str, max_diffs: int) -> int | None:
    """``max(m.start for m in find_near_matches(pattern, text, max_l_dist=max_diffs))`` or None."""
    if max_diffs == 0:
        i = text.rfind(pattern)
        return None if i < 0 else i
    if len(pattern) // (max_diffs + 1) < MIN_NGRAM:
        starts = _whole_text(pattern, text, max_diffs)
        return starts[-1] if starts else None
    for starts in _cluster_starts(pattern, text, max_diffs, reverse=True):
        return starts[-1]
    return None


class _Side:
    """The first (``last=False``) or last (``last=True``) start of ``pattern``, narrowed lazily.

    ``lo <= value <= hi`` always holds for the true value (``inf``/``-inf`` stand for "no match",
    which :func:`order_failure` treats as "never before" / "never after"); :meth:`resolve` runs
    one cluster's window search and narrows the bounds. Bounds without searching:

    - the value lies in the window of the first (last) cluster not known to be empty;
    - a cluster holding an exact occurrence has a match, and its first (last) start is at most
      (at least) the last (first) exact occurrence in it: each group keeps a distance-0 match,
      which is an exact occurrence.
    """

    def __init__(self, pattern: str, text: str, max_diffs: int, last: bool) -> None:
        self.pattern, self.text, self.max_diffs, self.last = pattern, text, max_diffs, last
        windows = _clusters(pattern, text, max_diffs)
        self.windows = windows[::-1] if last else windows  # nearest end first
        self.value: int | None = None  # set once the value is known

    def bounds(self) -> tuple[float, float]:
        if self.value is not None:
            return self.value, self.value
        if not self.windows:
            return (-inf, -inf) if self.last else (inf, inf)
        lo, hi = self.windows[0]
        for w_lo, w_hi in self.windows:  # the nearest cluster known to hold a match
            if self.last:
                i = self.text.find(self.pattern, w_lo, w_hi)
                if i >= 0:
                    return i, hi - 1
            else:
                i = self.text.rfind(self.pattern, w_lo, w_hi)
                if i >= 0:
                    return lo, i
        return (-inf, hi - 1) if self.last else (lo, inf)

    def known(self) -> bool:
        return self.value is not None or not self.windows

    def resolve(self) -> None:
        """Search the nearest cluster not known to be empty."""
        lo, hi = self.windows[0]
        starts = _window_starts(self.pattern, self.text[lo:hi], self.max_diffs)
        if starts:
            self.value = lo + (starts[-1] if self.last else starts[0])
        else:
            self.windows.pop(0)


def order_failure(before: str, after: str, text: str, max_diffs: int) -> str | None:
    """None when the first near match of ``before`` starts before the last one of ``after``
    (the reference ``order`` verdict), else why not: ``"before"`` / ``"after"`` (no near match,
    checked in that order) or ``"order"``.

    Searches only the clusters whose outcome the bounds of :class:`_Side` leave open. When neither
    text has a near match the reason may say ``"after"`` where the reference says ``"before"`` (the
    verdict is the same; finding out would mean searching every 'before' cluster).
    """
    g_min = min(len(before), len(after)) // (max_diffs + 1)
    if max_diffs == 0 or g_min < MIN_NGRAM:
        b, a = first_start(before, text, max_diffs), last_start(after, text, max_diffs)
        return "before" if b is None else "after" if a is None else None if b < a else "order"
    first, last = _Side(before, text, max_diffs, last=False), _Side(after, text, max_diffs, last=True)
    while True:
        if first.known() and first.value is None:
            return "before"
        if last.known() and last.value is None:  # without searching whether 'before' has a match
            return "after"
        b_lo, b_hi = first.bounds()
        a_lo, a_hi = last.bounds()
        if b_hi < a_lo:
            return None
        if b_lo >= a_hi and (first.known() or b_hi < inf) and (last.known() or a_lo > -inf):
            return "before" if b_lo == inf else "after" if a_hi == -inf else "order"
        if not first.known() and (b_hi == inf or a_lo > -inf):
            first.resolve()
        else:
            last.resolve()

"""Optional rewards: similarity to a reference answer, element counts, rectangular tables, medoid.

None of these is part of olmOCR 2's final recipe (bench + front matter + EOS); they are the other
rewards olmOCR's GRPO script offers, each selectable with a weight in ``rewards.weights``. All
compare **page texts** (front matter removed with :func:`olmpipe.prompts.parse_page_output`):
the front matter has its own reward.

Long texts are cut to ``max_chars`` before edit distances, so a 1 MB runaway completion costs
milliseconds, not minutes (Levenshtein is quadratic in the worst case). Tables and equations are
found in one linear scan (a regular expression's lazy ``.*?`` would rescan the rest of the text
from every unclosed ``<table``), and :func:`table_is_rectangular` does span arithmetic on column
intervals instead of expanding a grid, within :data:`MAX_RECT_SPANS` per completion: these rewards
run in the training process, so they are bounded in time and memory by construction.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from olmpipe.rewards.text import column, completion_text

_TABLE_OPEN = re.compile(r"<table\b", re.IGNORECASE)
_TABLE_CLOSE = re.compile(r"</table\s*>", re.IGNORECASE)
#: Equation delimiters ``$$..$$``, ``\(..\)``, ``\[..\]`` (non-empty content, like ``(.+?)``).
_MATH_DELIMITERS = (("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]"))
#: Row-intervals (cells x rows they span) :func:`table_is_rectangular` may place per completion;
#: a table past it counts as not rectangular (~100 bytes and ~1 us each: 100 MB, 1 s at most).
MAX_RECT_SPANS = 1_000_000


def find_tables(text: str) -> list[str]:
    """The ``<table ...>...</table>`` blocks of ``text``, as
    ``re.findall(r"<table\\b[^>]*>.*?</table\\s*>", text, re.I | re.S)`` finds them, in linear time:
    once no ``>`` or no closing tag follows an opening, none follows any later one either."""
    out: list[str] = []
    pos = 0
    while (opening := _TABLE_OPEN.search(text, pos)) is not None:
        tag_end = text.find(">", opening.end())
        if tag_end < 0:
            break
        closing = _TABLE_CLOSE.search(text, tag_end + 1)
        if closing is None:
            break
        out.append(text[opening.start():closing.end()])
        pos = closing.end()
    return out


def _count_delimited(text: str, opening: str, closing: str) -> int:
    """Matches of ``re.escape(opening) + "(.+?)" + re.escape(closing)`` (DOTALL), in linear time."""
    count, pos = 0, 0
    while (start := text.find(opening, pos)) >= 0:
        end = text.find(closing, start + len(opening) + 1)  # at least one character between
        if end < 0:
            break
        count += 1
        pos = end + len(closing)
    return count


def _page_text(value: Any) -> str | None:
    from olmpipe.prompts import parse_page_output

    text = completion_text(value)
    return None if text is None else parse_page_output(text).text


def _against_reference(completions, reference, score) -> list[float | None]:
    """``score(page text, reference page text)`` per completion; None where a row has no reference."""
    completions = list(completions or [])
    refs = column({"reference": reference}, "reference", len(completions))
    out: list[float | None] = []
    for completion, ref in zip(completions, refs, strict=True):
        ref_text = _page_text(ref) if isinstance(ref, str) else None
        out.append(None if ref_text is None else score(_page_text(completion) or "", ref_text))
    return out


def count_elements(text: str) -> tuple[int, int]:
    """Numbers of HTML tables and of LaTeX equations (``$$..$$``, ``\\(..\\)``, ``\\[..\\]``) in ``text``."""
    return len(find_tables(text)), sum(_count_delimited(text, o, c) for o, c in _MATH_DELIMITERS)


class EditDistanceReward:
    """Normalized edit similarity (1 = identical) between the page text and the reference's.

    Rows without a ``reference`` score None (not applicable), so the reward only counts where a
    reference exists.
    """

    def __init__(self, max_chars: int = 100_000):
        self.max_chars = int(max_chars)
        self.__name__ = "edit_distance_reward"

    def __call__(self, prompts=None, completions=None, reference=None, **kwargs) -> list[float | None]:
        from rapidfuzz.distance import Levenshtein

        cut = self.max_chars
        return _against_reference(
            completions, reference,
            lambda text, ref: float(Levenshtein.normalized_similarity(text[:cut], ref[:cut])),
        )


def element_count_reward(prompts=None, completions=None, reference=None, **kwargs) -> list[float | None]:
    """0.5 per element kind (HTML tables, equations) whose count equals the reference's; None without one.

    >>> element_count_reward(completions=["<table></table>"], reference=["<table></table> $$x$$"])
    [0.5]
    """
    def score(text: str, ref: str) -> float:
        got, want = count_elements(text), count_elements(ref)
        return 0.5 * sum(g == w for g, w in zip(got, want, strict=True))

    return _against_reference(completions, reference, score)


def table_is_rectangular(table_html: str, *, budget: list[int] | None = None) -> bool:
    """True when the cells of an HTML table (with their row/col spans) fill a full grid without holes.

    Spans count from 1 to 1000 (other values: 1). Every row must be covered exactly by columns
    ``0..W-1`` for one ``W``; rows are checked one at a time and the first that is not ends the
    check. Column coverage is kept as intervals (one per cell and row it spans, rows past the
    table dropped), so a ``colspan`` costs nothing and a ``rowspan`` one interval per row.
    ``budget`` (a one-element list, shared by the tables of a completion) is the number of such
    intervals still allowed; a table that needs more is not rectangular.
    """
    import lxml.html

    budget = [MAX_RECT_SPANS] if budget is None else budget
    try:
        root = lxml.html.fragment_fromstring(table_html, create_parent=False)
    except Exception:  # noqa: BLE001 - unparsable markup is simply not a rectangular table
        return False
    rows = list(root.iter("tr"))
    n_rows = len(rows)
    from_above: dict[int, list[tuple[int, int]]] = defaultdict(list)  # row -> [start, end) spans
    width = None
    for r, tr in enumerate(rows):
        above = sorted(from_above.pop(r, ()))
        covered = list(above)
        k, c = 0, 0
        for cell in tr:
            if cell.tag not in ("td", "th"):
                continue
            while k < len(above) and above[k][0] <= c:  # skip columns taken by cells above
                c = max(c, above[k][1])
                k += 1
            rowspan = min(_span(cell.get("rowspan")), n_rows - r)
            colspan = _span(cell.get("colspan"))
            budget[0] -= rowspan
            if budget[0] < 0:
                return False
            covered.append((c, c + colspan))
            for dr in range(1, rowspan):
                from_above[r + dr].append((c, c + colspan))
            c += colspan
        covered.sort()
        end = 0
        for start, stop in covered:  # the union must be one interval starting at column 0
            if start > end:
                return False
            end = max(end, stop)
        if end == 0 or (width is not None and end != width):
            return False
        width = end
    return width is not None


def _span(value: str | None) -> int:
    try:
        return max(1, min(int(value), 1000)) if value is not None else 1
    except ValueError:
        return 1


def rect_tables_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """Share of the page's HTML tables that are rectangular; 1.0 when there are none.

    Bounded by construction (see the module docstring): the tables of one completion may place
    :data:`MAX_RECT_SPANS` span intervals in all; tables past that count as not rectangular.

    >>> rect_tables_reward(completions=["<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"])
    [0.0]
    """
    out: list[float | None] = []
    for completion in completions or []:
        tables = find_tables(_page_text(completion) or "")
        budget = [MAX_RECT_SPANS]
        out.append(1.0 if not tables else sum(table_is_rectangular(t, budget=budget) for t in tables) / len(tables))
    return out


class MedoidReward:
    """Agreement with the group's medoid: 1 - normalized edit distance to the completion closest to all others.

    Groups are the completions of the same page (the ``pdf`` and ``page`` columns); without those
    columns the whole call is one group. Under multi-GPU training a group is the part of the page's
    completions a process scores. Texts are cut to ``max_chars``.

    Cost: a group of ``k`` completions needs ``k (k - 1) / 2`` edit distances (rapidfuzz, in C; two
    texts of ``max_chars`` take about ``max_chars**2 / 64`` word operations), a ``k x k`` matrix
    (``8 k**2`` bytes) and ``k**2`` additions: ``O(k**2)`` distances, where the pairwise loop it
    replaces also scanned every pair for every member (``O(k**3)``: 7.5 s per page at k = 400 on
    short texts). The difficulty stage's ``k`` (``train.difficulty.samples``) has a schema maximum for
    this reason (``benchmarks/medoid.py`` measures both).
    The medoid is the member with the smallest sum of distances to the others (ties: the first), the
    sums added in the order of the members, as the pairwise loop this replaces did, so the rewards are
    the same to the last bit.
    """

    def __init__(self, max_chars: int = 10_000):
        self.max_chars = int(max_chars)
        self.__name__ = "medoid_reward"

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float | None]:
        completions = list(completions or [])
        n = len(completions)
        keys = list(zip(column(kwargs, "pdf", n), column(kwargs, "page", n), strict=True))
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[key].append(i)
        texts = [(_page_text(c) or "")[: self.max_chars] for c in completions]
        out: list[float | None] = [None] * n
        for members in groups.values():
            for m, reward in zip(members, medoid_agreement([texts[m] for m in members]), strict=True):
                out[m] = reward
        return out


def medoid_agreement(texts: list[str]) -> list[float]:
    """1 - normalized edit distance of each text to the group's medoid (1.0 for the medoid itself).

    >>> medoid_agreement(["abc", "abd", "xyz"])
    [1.0, 0.6666666666666667, 0.0]
    """
    import numpy as np
    from rapidfuzz.distance import Levenshtein
    from rapidfuzz.process import cdist

    k = len(texts)
    if k == 1:
        return [1.0]
    # each pair once (the distance is symmetric), one C call per row: texts[i] against every later text
    dist = np.zeros((k, k), dtype=np.float64)
    for i in range(k - 1):
        row = cdist(texts[i : i + 1], texts[i + 1 :], scorer=Levenshtein.normalized_distance, dtype=np.float64,
                    workers=1)[0]
        dist[i, i + 1 :] = row
        dist[i + 1 :, i] = row
    # Each row's sum without its diagonal, added left to right (np.cumsum is sequential) as the
    # pairwise loop's ``sum(...)`` did: the same totals, so the same medoid on near ties.
    totals = np.cumsum(dist[~np.eye(k, dtype=bool)].reshape(k, k - 1), axis=1)[:, -1]
    medoid = int(np.argmin(totals))  # the first of equal minima, like min(members, key=(total, index))
    rewards = 1.0 - dist[medoid]
    rewards[medoid] = 1.0
    return rewards.tolist()

"""Optional rewards: similarity to a reference answer, element counts, rectangular tables, medoid.

None of these is part of olmOCR 2's final recipe (bench + front matter + EOS); they are the other
rewards olmOCR's GRPO script offers, each selectable with a weight in ``rewards.weights``. All
compare **page texts** (front matter removed with :func:`olmpipe.prompts.parse_page_output`):
the front matter has its own reward.

Long texts are cut to ``max_chars`` before edit distances, so a 1 MB runaway completion costs
milliseconds, not minutes (Levenshtein is quadratic in the worst case).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from olmpipe.rewards.text import column, completion_text

_TABLE_RE = re.compile(r"<table\b[^>]*>.*?</table\s*>", re.IGNORECASE | re.DOTALL)
_MATH_RES = (
    re.compile(r"\$\$(.+?)\$\$", re.DOTALL),
    re.compile(r"\\\((.+?)\\\)", re.DOTALL),
    re.compile(r"\\\[(.+?)\\\]", re.DOTALL),
)


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
    return len(_TABLE_RE.findall(text)), sum(len(r.findall(text)) for r in _MATH_RES)


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


def table_is_rectangular(table_html: str) -> bool:
    """True when the cells of an HTML table (with their row/col spans) fill a full grid without holes."""
    import lxml.html

    try:
        root = lxml.html.fragment_fromstring(table_html, create_parent=False)
    except Exception:  # noqa: BLE001 - unparsable markup is simply not a rectangular table
        return False
    occupied: dict[int, set[int]] = defaultdict(set)
    rows = [tr for tr in root.iter("tr")]
    for r, tr in enumerate(rows):
        c = 0
        for cell in tr:
            if cell.tag not in ("td", "th"):
                continue
            while c in occupied[r]:
                c += 1
            rowspan, colspan = _span(cell.get("rowspan")), _span(cell.get("colspan"))
            for dr in range(rowspan):
                occupied[r + dr].update(range(c, c + colspan))
            c += colspan
    grid = [occupied[r] for r in range(len(rows))]
    if not grid or not any(grid):
        return False
    width = max(max(cols) + 1 for cols in grid if cols)
    return all(cols == set(range(width)) for cols in grid)


def _span(value: str | None) -> int:
    try:
        return max(1, min(int(value), 1000)) if value is not None else 1
    except ValueError:
        return 1


def rect_tables_reward(prompts=None, completions=None, **kwargs) -> list[float | None]:
    """Share of the page's HTML tables that are rectangular; 1.0 when there are none.

    >>> rect_tables_reward(completions=["<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"])
    [0.0]
    """
    out: list[float | None] = []
    for completion in completions or []:
        tables = _TABLE_RE.findall(_page_text(completion) or "")
        out.append(1.0 if not tables else sum(map(table_is_rectangular, tables)) / len(tables))
    return out


class MedoidReward:
    """Agreement with the group's medoid: 1 - normalized edit distance to the completion closest to all others.

    Groups are the completions of the same page (the ``pdf`` and ``page`` columns); without those
    columns the whole call is one group. Under multi-GPU training a group is the part of the page's
    completions a process scores. Texts are cut to ``max_chars`` (pairwise distances are quadratic
    in the group size).
    """

    def __init__(self, max_chars: int = 10_000):
        self.max_chars = int(max_chars)
        self.__name__ = "medoid_reward"

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float | None]:
        from rapidfuzz.distance import Levenshtein

        completions = list(completions or [])
        n = len(completions)
        keys = list(zip(column(kwargs, "pdf", n), column(kwargs, "page", n), strict=True))
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[key].append(i)
        texts = [(_page_text(c) or "")[: self.max_chars] for c in completions]
        out: list[float | None] = [None] * n
        for members in groups.values():
            if len(members) == 1:
                out[members[0]] = 1.0
                continue
            dist = {
                (a, b): Levenshtein.normalized_distance(texts[a], texts[b])
                for i, a in enumerate(members)
                for b in members[i + 1 :]
            }
            total = {m: sum(d for pair, d in dist.items() if m in pair) for m in members}
            medoid = min(members, key=lambda m: (total[m], m))
            for m in members:
                out[m] = 1.0 if m == medoid else 1.0 - dist[(min(m, medoid), max(m, medoid))]
        return out

"""Whether two rendered equations count as the same: the reference's two checks, with a time bound.

Semantics of olmocr 0.4.27 (``olmocr/bench/katex/render.py::compare_rendered_equations``), which
takes the *test's* equation ("reference") and an equation found in the page ("hypothesis"):

1. **MathML containment.** Each MathML is reduced to the children of its ``<semantics>`` element
   other than ``<annotation>`` (re-serialized by BeautifulSoup's XML parser; the whole document
   when there is no ``<semantics>``, as for a render error whose "MathML" is the error text), all
   whitespace removed. The pair matches when the reference's string is a substring of the
   hypothesis's.
2. **Layout neighbours.** Otherwise the rendered leaf spans (zero-width spaces dropped) are split
   into one box per character (the span's width shared equally). Each box gets its nearest box
   above, below, left and right (centres within 5 px on the other axis, ties to the first box).
   The pair matches when every reference character can be assigned a distinct hypothesis box
   with the same character, such that wherever the reference box has a neighbour, the assigned
   box has one too: the neighbour's image if that neighbour was already assigned, else a box with
   the same character. An empty reference (e.g. a render error) matches anything.

The search of step 2 is a depth-first search over assignments like the reference's, made
iterative (no recursion limit) and bounded by a deadline; the answer (whether an assignment
exists) does not depend on the order of the search.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np
from bs4 import BeautifulSoup
from lxml import etree

#: Bump when the comparison's semantics change: cached pair verdicts are keyed by it.
COMPARE_VERSION = 1

#: Neighbour tolerance of the reference, in CSS px.
NEIGHBOUR_TOLERANCE = 5.0

_WHITESPACE = re.compile(r"\s+")
_ZERO_WIDTH_SPACE = "\u200b"
_UP, _DOWN, _LEFT, _RIGHT = range(4)


class CompareTimeout(Exception):
    """The deadline passed before the comparison finished."""


_MATHML_NS = "{http://www.w3.org/1998/Math/MathML}"
_EMPTY_DOCUMENT = '<?xmlversion="1.0"encoding="utf-8"?>'


def mathml_inner(mathml: str) -> str:
    """The reference's normalized MathML: ``<semantics>`` children but ``<annotation>``, no whitespace.

    KaTeX's MathML is plain (no entity, comment, CDATA or processing instruction, one namespace)
    for almost every equation; for those :func:`_plain_inner` serializes lxml's tree the way
    BeautifulSoup does, 30x faster. Anything else goes through BeautifulSoup, as the reference.
    """
    fast = _plain_inner(mathml)
    return fast if fast is not None else _soup_inner(mathml)


def _plain_inner(mathml: str) -> str | None:
    """BeautifulSoup's (``"xml"`` parser) serialization of the ``<semantics>`` children, whitespace
    removed, for plain MathML; None when the document is not plain (the caller then uses it)."""
    if not _encodable(mathml):
        return None  # lone surrogates: BeautifulSoup fails and the reference keeps the raw string
    if "<" not in mathml and "&" not in mathml:
        return _EMPTY_DOCUMENT  # no element at all (a KaTeX error message): the bare XML declaration
    # entities outside the annotation (the TeX source, which is dropped) are left to BeautifulSoup
    # (it drops unknown ones such as &nbsp; and empties elements holding &amp;)
    if "&" in mathml.split("<annotation", 1)[0] or "<!" in mathml or "<?" in mathml \
            or mathml.count("xmlns") != 1:
        return None
    try:
        root = etree.fromstring(mathml.encode("utf-8"))
    except (etree.XMLSyntaxError, ValueError, UnicodeEncodeError):
        return None
    semantics = next(root.iter(_MATHML_NS + "semantics"), None)
    if semantics is None:
        return None
    try:
        parts = [_plain_text(semantics.text)]
        for child in semantics:
            if child.tag != _MATHML_NS + "annotation":
                _serialize(child, parts)
            parts.append(_plain_text(child.tail))
    except _NotPlain:
        return None
    return _WHITESPACE.sub("", "".join(parts))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _NotPlain(Exception):
    pass


def _serialize(element, parts: list[str]) -> None:
    tag = element.tag
    if not isinstance(tag, str) or not tag.startswith(_MATHML_NS) or element.prefix is not None:
        raise _NotPlain
    name = tag[len(_MATHML_NS):]
    attrs = []
    for key, value in sorted(element.attrib.items()):  # BeautifulSoup's formatter sorts them
        if key.startswith("{") or ">" in value or '"' in value:
            raise _NotPlain
        attrs.append(f' {key}="{value}"')
    head = "<" + name + "".join(attrs)
    if element.text is None and len(element) == 0:
        parts.append(head + "/>")  # BeautifulSoup writes childless XML elements self-closed
        return
    parts.append(head + ">")
    parts.append(_plain_text(element.text))
    for child in element:
        _serialize(child, parts)
        parts.append(_plain_text(child.tail))
    parts.append("</" + name + ">")


def _plain_text(text: str | None) -> str:
    if text is None:
        return ""
    if ">" in text:  # BeautifulSoup would write &gt;
        raise _NotPlain
    return text


def _soup_inner(mathml: str) -> str:
    """The reference's own procedure (BeautifulSoup's XML parser)."""
    try:
        soup = BeautifulSoup(mathml, "xml")
        semantics = soup.find("semantics")
        if semantics:
            inner = "".join(str(child) for child in semantics.contents
                            if getattr(child, "name", None) != "annotation")
        else:
            inner = str(soup)
    except Exception:  # noqa: BLE001 - the reference falls back to the raw string on any parser error
        inner = mathml
    return _WHITESPACE.sub("", inner)


@dataclass(frozen=True)
class Layout:
    """One box per rendered character and each box's four nearest neighbours (index or -1)."""

    chars: tuple[str, ...]
    neighbours: np.ndarray  # shape (n, 4): up, down, left, right

    @classmethod
    def from_spans(cls, spans, deadline: float | None = None) -> Layout:
        """Build the per-character boxes from ``(text, x, y, width, height)`` spans."""
        chars: list[str] = []
        centres_x: list[float] = []
        centres_y: list[float] = []
        for span in spans:
            text, x, y, width, height = span
            if text == _ZERO_WIDTH_SPACE:
                continue
            total = len(text)
            for index, char in enumerate(text):
                # the reference's arithmetic, in the same order, so the floats are identical
                box_x = x + (width * index) / total
                box_w = width / total
                chars.append(char)
                centres_x.append(box_x + box_w / 2)
                centres_y.append(y + height / 2)
        return cls(tuple(chars), _neighbours(np.array(centres_x), np.array(centres_y), deadline))


def _neighbours(cx: np.ndarray, cy: np.ndarray, deadline: float | None) -> np.ndarray:
    """Nearest box above/below/left/right of each box (the reference's rules, vectorized per box)."""
    n = len(cx)
    result = np.full((n, 4), -1, dtype=np.int64)
    inf = np.inf
    for i in range(n):
        if deadline is not None and i % 64 == 0 and time.monotonic() > deadline:
            raise CompareTimeout("layout neighbours")
        same_column = np.abs(cx - cx[i]) <= NEIGHBOUR_TOLERANCE
        same_row = np.abs(cy - cy[i]) <= NEIGHBOUR_TOLERANCE
        for direction, mask, dist in (
            (_UP, same_column & (cy < cy[i]), cy[i] - cy),
            (_DOWN, same_column & (cy > cy[i]), cy - cy[i]),
            (_LEFT, same_row & (cx < cx[i]), cx[i] - cx),
            (_RIGHT, same_row & (cx > cx[i]), cx - cx[i]),
        ):
            if mask.any():
                # argmin returns the first of equal minima: the reference keeps the first box
                # found with a strictly smaller distance, i.e. the same one.
                result[i, direction] = int(np.argmin(np.where(mask, dist, inf)))
    return result


def layouts_match(ref: Layout, hyp: Layout, deadline: float | None = None) -> bool:
    """Step 2 of the module docstring: does an assignment of reference boxes to hypothesis boxes exist?"""
    n = len(ref.chars)
    positions: dict[str, list[int]] = {}
    for j, char in enumerate(hyp.chars):
        positions.setdefault(char, []).append(j)
    candidates = []
    for char in ref.chars:
        found = positions.get(char)
        if not found:
            return False
        candidates.append(found)
    if n == 0:
        return True

    ref_nb = ref.neighbours.tolist()
    hyp_nb = hyp.neighbours.tolist()
    hyp_chars = hyp.chars
    ref_chars = ref.chars

    def fits(i: int, cand: int) -> bool:
        mine = ref_nb[i]
        theirs = hyp_nb[cand]
        for direction in range(4):
            nb = mine[direction]
            if nb < 0:
                continue
            image = theirs[direction]
            if image < 0:
                return False
            if nb < i:  # already assigned (the reference's `hyp_nb in assignment`)
                if assignment[nb] != image:
                    return False
            elif hyp_chars[image] != ref_chars[nb]:
                return False
        return True

    assignment = [-1] * n
    next_try = [0] * n
    used = bytearray(len(hyp_chars))
    i = 0
    steps = 0
    while True:
        steps += 1
        if deadline is not None and steps % 4096 == 0 and time.monotonic() > deadline:
            raise CompareTimeout("layout search")
        cands = candidates[i]
        placed = False
        while next_try[i] < len(cands):
            cand = cands[next_try[i]]
            next_try[i] += 1
            if not used[cand] and fits(i, cand):
                assignment[i] = cand
                used[cand] = 1
                placed = True
                break
        if placed:
            i += 1
            if i == n:
                return True
            next_try[i] = 0
            continue
        # no candidate left at level i: undo the previous level and try its next candidate
        next_try[i] = 0
        i -= 1
        if i < 0:
            return False
        used[assignment[i]] = 0
        assignment[i] = -1


def equations_match(ref_inner: str, ref_layout, hyp_inner: str, hyp_layout, deadline: float | None = None) -> bool:
    """Both checks: MathML containment first, then layout neighbours.

    ``ref_layout`` / ``hyp_layout`` are :class:`Layout` objects or zero-argument callables that
    build one (so that layouts are only computed when the MathML check fails).
    Raises :class:`CompareTimeout` when ``deadline`` (``time.monotonic()``) passes.
    """
    if ref_inner in hyp_inner:
        return True
    if callable(ref_layout):
        ref_layout = ref_layout()
    if callable(hyp_layout):
        hyp_layout = hyp_layout()
    return layouts_match(ref_layout, hyp_layout, deadline)

"""Mine olmOCR-Bench tests and a reference answer from the DOM of one synthetic HTML page.

The HTML is the ground truth of its rendered PDF, so tests read from its structure are right by
construction (``olmpipe.synth.bench`` still checks each one on the reference answer and drops
those that do not hold). What is mined follows olmocr 0.4.27
``olmocr/bench/synth/mine_html_templates.py`` (``generate_tests_from_html``, lines 736-1227;
``html_to_markdown_with_frontmatter``, lines 234-315), written anew:

- ``absent`` from the leaf texts of ``<header>``/``<footer>`` (and ``div.page-header``/
  ``div.page-footer``, lines 756-759) with ``max_diffs`` = 5% of the length (line 833), and from
  ``div.page-number`` with ``max_diffs`` 0 (lines 853-869);
- ``table`` from ``<table>`` cells (random rows x columns away from the header cells, lines
  893-905) with their neighbours and the first column/row heading (lines 924-963);
- ``order`` between sentences in reading (DOM) order, ``max_diffs`` = 2% of the longer one and
  skipped when that exceeds a quarter of either (lines 1092-1121); here the two sentences come
  from different blocks;
- ``math`` from ``\\(...\\)``, ``\\[...\\]`` and ``$$...$$`` in the page text (lines 1127-1164);
- ``present`` from sentences and ``baseline`` per page, which the reference does not mine;
- the reference's final filters (lines 1170-1225): every text field has a letter or digit, no LaTeX
  delimiter, no Unicode super/subscript; duplicates dropped.

Differences on purpose: ids are ``<pdf stem>_<type>_<n>`` (the reference uses uuid4, so its
benches differ run to run); every random choice comes from one ``random.Random(seed)``, so the same
HTML and seed give the same tests.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import escape

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString

from olmpipe.prompts import FrontMatter, format_page_output
from olmpipe.synth.render import MATH_DELIMITERS, find_delimited

#: Unicode forms of the characters in <sup>/<sub> (the reference's SUPERSCRIPT_MAP/SUBSCRIPT_MAP).
_SUP = str.maketrans("0123456789+-=()ni", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ")
_SUB = str.maketrans("0123456789+-=()aeoxhklmnpst", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜ")
_SUPSUB_CHARS = set("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜ")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
_DROP_TAGS = ("script", "style", "noscript", "template", "head", "title", "meta", "link")
_BLOCK_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "table", "div", "section", "article",
               "main", "ul", "ol", "blockquote", "pre", "figure", "figcaption", "dl", "dt", "dd",
               "aside", "nav", "body", "html"}
_LEAF_TAGS = ("span", "div", "p", "h3", "h4", "h5", "h6")
TEXT_FIELDS = ("text", "cell", "before", "after", "up", "down", "left", "right", "top_heading", "left_heading")


@dataclass(frozen=True)
class MineLimits:
    """How many tests of each kind one page may get (the reference's caps where it has them)."""

    present: int = 6
    order: int = 6  # the reference stops after 6 (its ``num_order_tests > 5``)
    table_cells: int = 25  # per table (reference: 25)
    math: int = 50  # reference: 50
    table_rows_scanned: int = 400  # a huge table is sampled from its first rows only
    table_cols_scanned: int = 100  # ... and its first columns


@dataclass
class MinedPage:
    """What one HTML page yields: the reference answer and the candidate tests (not yet checked)."""

    reference: str  # markdown with front matter, the answer a perfect model gives
    body: str  # the reference without its front matter
    front_matter: FrontMatter
    tests: list[dict] = field(default_factory=list)
    # The text an OCR that copies everything (running heads and page numbers included) would give;
    # ``absent`` tests must fail on it (they cannot fail on an empty page).
    full_text: str = ""


def _text(node) -> str:
    return re.sub(r"\s+", " ", node.get_text(" ") if isinstance(node, Tag) else str(node)).strip()


def _prepare(html: str) -> BeautifulSoup:
    """Parse, drop scripts/styles, turn page-header/footer divs into header/footer, sup/sub to Unicode."""
    soup = BeautifulSoup(html, "lxml")
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for tag in soup.find_all(class_="line-number"):
        tag.decompose()
    for cls, name in (("page-header", "header"), ("page-footer", "footer")):
        for tag in soup.find_all("div", class_=cls):
            tag.name = name
    for sup in soup.find_all("sup"):
        sup.replace_with(_text(sup).translate(_SUP))
    for sub in soup.find_all("sub"):
        sub.replace_with(_text(sub).translate(_SUB))
    return soup


def _is_text(node) -> bool:
    """Text a page prints: not a comment, doctype, declaration or processing instruction."""
    return isinstance(node, NavigableString) and not isinstance(node, PreformattedString)


def _is_furniture(tag: Tag) -> bool:
    """Running heads, feet and page numbers: not part of the page text olmOCR should write."""
    return tag.name in ("header", "footer") or "page-number" in (tag.get("class") or [])


def _inline_text(tag: Tag) -> str:
    """The text of ``tag`` with line breaks at ``<br>``, leaving out running heads, feet and page
    numbers (an explicit stack: the walk's depth is the page's, not Python's recursion limit)."""
    parts: list[str] = []
    stack = [(iter(tag.children), _is_furniture(tag))]
    while stack:
        children, furniture = stack[-1]
        node = next(children, None)
        if node is None:
            stack.pop()
        elif isinstance(node, Tag):
            if node.name == "br":
                parts.append("\n")
            stack.append((iter(node.children), furniture or _is_furniture(node)))
        elif _is_text(node) and not furniture:
            parts.append(re.sub(r"\s+", " ", str(node)))
    lines = [re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parts).split("\n")]
    return "\n".join(line for line in lines if line)


def _clean_table(table: Tag) -> str:
    """The table as bare HTML (rows and cells, rowspan/colspan kept), the form olmOCR 2 writes."""
    rows = []
    for tr in table.find_all("tr"):
        cells = []
        for cell in tr.find_all(["td", "th"], recursive=False):
            attrs = "".join(f' {a}="{int(cell[a])}"' for a in ("rowspan", "colspan")
                            if str(cell.get(a, "")).isdigit() and int(cell[a]) > 1)
            # escaped: a cell's "<" must not become markup in the reference (the scorer parses it)
            cells.append(f"<{cell.name}{attrs}>{escape(_text(cell), quote=False)}</{cell.name}>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


@dataclass
class _Block:
    kind: str  # heading | paragraph | item | table | math
    text: str


def _has_block(tag: Tag) -> bool:
    """Whether a block element lies below ``tag`` (``tag.find(_BLOCK_TAGS)`` costs the subtree's
    depth before its first step, so a walk calling it at every level of a deep page is quadratic)."""
    stack = [tag]
    while stack:
        for child in stack.pop().children:
            if isinstance(child, Tag):
                if child.name in _BLOCK_TAGS:
                    return True
                stack.append(child)
    return False


def _blocks(body: Tag) -> list[_Block]:
    """Walk the body in DOM order (the reading order of the HTML) and collect text blocks.

    The walk keeps its own stack of open containers (children left, pending inline text, list
    depth), so a page nested 150,000 levels deep costs time, not Python's recursion limit."""
    out: list[_Block] = []

    def flush(pending: list[str]) -> None:
        text = re.sub(r"[ \t]+", " ", "".join(pending)).strip()
        pending.clear()
        if text:
            out.append(_Block("paragraph", text))

    stack: list[tuple[Iterator, list[str], int]] = [(iter(body.children), [], 0)]
    while stack:
        children, pending, list_depth = stack[-1]
        child = next(children, None)
        if child is None:
            flush(pending)
            stack.pop()
            continue
        if isinstance(child, NavigableString):
            if _is_text(child):
                pending.append(str(child).replace("\n", " "))
            continue
        if not isinstance(child, Tag) or _is_furniture(child):
            continue
        name = child.name
        if name in ("img", "svg", "canvas", "video", "iframe", "object", "embed") or (
                name == "div" and "image" in (child.get("class") or [])):
            flush(pending)
            continue
        if name not in _BLOCK_TAGS:
            pending.append(_inline_text(child).replace("\n", " ") if name != "br" else " ")
            continue
        flush(pending)
        if re.fullmatch(r"h[1-6]", name):
            text = _inline_text(child).replace("\n", " ")
            if text:
                out.append(_Block("heading", "#" * int(name[1]) + " " + text))
        elif name == "table":
            out.append(_Block("table", _clean_table(child)))
        elif name == "li":
            text = _inline_text(child).replace("\n", " ")
            if text:
                out.append(_Block("item", "  " * list_depth + "- " + text))
        elif name in ("ul", "ol"):
            stack.append((iter(child.children), [], list_depth + 1 if list_depth else 0))
        elif name == "p" or not _has_block(child):
            text = _inline_text(child)
            if text:
                kind = "math" if re.fullmatch(r"\\\[.*\\\]|\$\$.*\$\$", text, re.DOTALL) else "paragraph"
                out.append(_Block(kind, text))
        else:
            stack.append((iter(child.children), [], list_depth))
    return out


def front_matter_for(soup: BeautifulSoup, blocks: list[_Block]) -> FrontMatter:
    """Language from ``<html lang>`` (``pt-BR`` -> ``pt``), table flag when tables hold most of the
    text, diagram flag when image placeholders do (olmocr's ``extract_html_metadata``, lines 171-231)."""
    html = soup.find("html")
    lang = str(html.get("lang")) if html is not None and html.get("lang") else "en"
    if len(lang) == 5 and lang[2] == "-":
        lang = lang[:2]
    table_len = sum(len(BeautifulSoup(b.text, "lxml").get_text().strip()) for b in blocks if b.kind == "table")
    text_len = sum(len(b.text) for b in blocks if b.kind != "table")
    images = len(soup.find_all("div", class_="image")) + len(soup.find_all("img"))
    total = text_len + table_len + 500 * images
    return FrontMatter(primary_language=lang, is_rotation_valid=True, rotation_correction=0,
                       is_table=bool(total) and table_len / total > 0.5,
                       is_diagram=bool(total) and 500 * images / total > 0.5)


def sentences_of(blocks: list[_Block]) -> list[tuple[int, str]]:
    """(block index, sentence) for the prose blocks, in reading order; headings count as one sentence."""
    out = []
    for i, block in enumerate(blocks):
        if block.kind in ("table", "math"):
            continue
        text = block.text.lstrip("#").strip()
        text = text.removeprefix("- ")
        for line in text.split("\n"):
            for sentence in _SENTENCE_END.split(line.strip()):
                if sentence.strip():
                    out.append((i, sentence.strip()))
    return out


def _furniture_texts(soup: BeautifulSoup) -> list[tuple[str, str]]:
    """(kind, text) of the leaf texts of headers/footers and of page numbers (reference lines 797-869)."""
    found: list[tuple[str, str]] = []
    for number in soup.find_all(class_="page-number"):
        text = _text(number)
        if text:
            found.append(("page_number", text))
    for tag in soup.find_all(["header", "footer"]):
        leaves = [t for t in tag.find_all(_LEAF_TAGS) if not t.find(_LEAF_TAGS)
                  and "page-number" not in (t.get("class") or [])
                  and not t.find_parent(class_="page-number")]
        texts = [_text(t) for t in leaves if _text(t)] or ([_text(tag)] if _text(tag) else [])
        found.extend((tag.name, t) for t in texts)
    return found


def _table_grid(table: Tag, max_rows: int, max_cols: int) -> tuple[list[list[str]], set[int], set[int]]:
    """The table as a grid (spans repeated), header rows (in thead or all <th>) and header columns.

    Only the first ``max_rows`` rows and ``max_cols`` columns are read: spans repeat a cell's text
    up to 50 x 50 times, so 20,000 spanning cells in one row (660 kB of HTML) would otherwise make
    a grid of 50 million entries."""
    grid: list[list[str | None]] = []
    is_th: list[list[bool]] = []
    header_rows: set[int] = set()
    for r, tr in enumerate(table.find_all("tr")[:max_rows]):
        while len(grid) <= r:
            grid.append([])
            is_th.append([])
        cells = tr.find_all(["td", "th"], recursive=False)
        c = 0
        for cell in cells:
            while c < len(grid[r]) and grid[r][c] is not None:
                c += 1
            if c >= max_cols:
                break
            rowspan = min(int(cell.get("rowspan", 1)) if str(cell.get("rowspan", 1)).isdigit() else 1, 50)
            colspan = min(int(cell.get("colspan", 1)) if str(cell.get("colspan", 1)).isdigit() else 1, 50)
            text = _text(cell)
            for dr in range(max(rowspan, 1)):
                while len(grid) <= r + dr:
                    grid.append([])
                    is_th.append([])
                for dc in range(min(max(colspan, 1), max_cols - c)):
                    row = grid[r + dr]
                    while len(row) <= c + dc:
                        row.append(None)
                        is_th[r + dr].append(False)
                    row[c + dc] = text
                    is_th[r + dr][c + dc] = cell.name == "th"
            c += max(colspan, 1)
        if tr.find_parent("thead") is not None or (cells and all(x.name == "th" for x in cells)):
            header_rows.add(r)
    width = max((len(row) for row in grid), default=0)
    grid_out = [[cell or "" for cell in row] + [""] * (width - len(row)) for row in grid]
    th = [row + [False] * (width - len(row)) for row in is_th]
    body_rows = [r for r in range(len(grid_out)) if r not in header_rows]
    header_cols = {c for c in range(width) if body_rows and all(th[r][c] for r in body_rows)}
    return grid_out, header_rows, header_cols


def _table_tests(soup: BeautifulSoup, stem: str, pdf: str, rng: random.Random, limits: MineLimits) -> list[dict]:
    tests = []
    for t_idx, table in enumerate(soup.find_all("table")):
        if table.find_parent(["header", "footer"]):
            continue
        grid, header_rows, header_cols = _table_grid(table, limits.table_rows_scanned, limits.table_cols_scanned)
        if len(grid) < 2 or not grid or len(grid[0]) < 2:
            continue
        rows = [r for r in range(len(grid)) if r not in header_rows]
        cols = [c for c in range(len(grid[0])) if c not in header_cols]
        if len(rows) < 2 or len(cols) < 2:
            positions = [(r, c) for r in range(len(grid)) for c in range(len(grid[0]))]
        else:
            positions = [(r, c) for r in rng.sample(rows, min(3, len(rows)))
                         for c in rng.sample(cols, min(2, len(cols)))]
        rng.shuffle(positions)
        made = 0
        for r, c in positions:
            cell = grid[r][c]
            if len(cell) < 3:
                continue
            test = {"pdf": pdf, "page": 1, "id": f"{stem}_table{t_idx}_{made}", "type": "table",
                    "cell": cell, "max_diffs": 0, "ignore_markdown_tables": True}
            for name, (rr, cc) in {"up": (r - 1, c), "down": (r + 1, c), "left": (r, c - 1),
                                   "right": (r, c + 1)}.items():
                if 0 <= rr < len(grid) and 0 <= cc < len(grid[0]) and grid[rr][cc] and grid[rr][cc] != cell:
                    test[name] = grid[rr][cc]
            if r not in header_rows and c not in header_cols:
                tops = [grid[h][c] for h in sorted(header_rows) if grid[h][c]]
                lefts = [grid[r][h] for h in sorted(header_cols) if grid[r][h]]
                if tops:
                    test["top_heading"] = tops[0]
                if lefts:
                    test["left_heading"] = lefts[0]
            if any(k in test for k in ("up", "down", "left", "right", "top_heading", "left_heading")):
                tests.append(test)
                made += 1
            if made >= limits.table_cells:
                break
    return tests


def _keep(test: dict) -> bool:
    """The reference's last filter (lines 1170-1211): letters or digits, no LaTeX, no super/subscripts."""
    if test["type"] in ("math", "baseline"):
        return True
    for name in TEXT_FIELDS:
        value = test.get(name)
        if value is None:
            continue
        if not any(ch.isalnum() for ch in value) or any(d in value for d in ("\\(", "\\)", "\\[", "\\]")):
            return False
        if any(ch in _SUPSUB_CHARS for ch in value):
            return False
    return True


def mine_page(html: str, pdf: str, *, seed: int, limits: MineLimits = MineLimits()) -> MinedPage:
    """Reference answer and candidate tests of one page; ``pdf`` is the PDF's id under ``pdfs/``.

    >>> page = mine_page("<html><body><p>Hello there, reader. Second sentence here.</p></body></html>",
    ...                  "x.pdf", seed=0)
    >>> page.body
    'Hello there, reader. Second sentence here.'
    """
    stem = pdf[:-4] if pdf.lower().endswith(".pdf") else pdf
    rng = random.Random(f"{seed}:{pdf}")
    soup = _prepare(html)
    body = soup.find("body") or soup
    blocks = _blocks(body)
    front = front_matter_for(soup, blocks)
    text = "\n\n".join(b.text for b in blocks)
    furniture = _furniture_texts(soup)
    tests: list[dict] = []
    for n, (kind, ftext) in enumerate(furniture):
        first = ftext.split("\n")[0]
        if kind == "page_number":
            tests.append({"pdf": pdf, "page": 1, "id": f"{stem}_page_number_{n}", "type": "absent",
                          "text": first, "max_diffs": 0})
        elif len(first) > 3 or any(ch.isdigit() for ch in first):
            tests.append({"pdf": pdf, "page": 1, "id": f"{stem}_{kind}_{n}", "type": "absent",
                          "text": first, "max_diffs": round(len(first) * 0.05)})
    tests = [t for t in tests if t["text"] not in text]  # reference line 1168
    tests += _table_tests(soup, stem, pdf, rng, limits)
    sentences = sentences_of(blocks)
    usable = [(i, s) for i, s in sentences if 20 <= len(s) <= 300]
    for n, (_, sentence) in enumerate(sorted(rng.sample(usable, min(limits.present, len(usable))))):
        tests.append({"pdf": pdf, "page": 1, "id": f"{stem}_present_{n}", "type": "present",
                      "text": sentence, "max_diffs": round(len(sentence) * 0.02)})
    order = list(range(len(sentences)))
    rng.shuffle(order)
    made = 0
    for a, b in zip(order[0::2], order[1::2], strict=False):
        (bi, first), (bj, second) = sentences[min(a, b)], sentences[max(a, b)]
        if bi == bj or len(first) < 5 or len(second) < 5:
            continue
        max_diffs = round(max(len(first), len(second)) * 0.02)
        if max_diffs > len(first) // 4 or max_diffs > len(second) // 4:
            continue
        tests.append({"pdf": pdf, "page": 1, "id": f"{stem}_order_{made}", "type": "order",
                      "before": first, "after": second, "max_diffs": max_diffs})
        made += 1
        if made >= limits.order:
            break
    equations: dict[str, None] = {}
    for opening, closing in MATH_DELIMITERS:
        for match in find_delimited(text, opening, closing):
            if len(match.strip()) > 2:
                equations.setdefault(match.strip())
    for n, equation in enumerate(list(equations)[: limits.math]):
        tests.append({"pdf": pdf, "page": 1, "id": f"{stem}_math_{n}", "type": "math", "math": equation,
                      "max_diffs": 0, "ignore_dollar_delimited": True})
    tests.append({"pdf": pdf, "page": 1, "id": f"{stem}_baseline", "type": "baseline", "max_diffs": 0})
    unique: dict[tuple, dict] = {}
    for test in filter(_keep, tests):
        unique.setdefault(tuple(sorted((k, str(v)) for k, v in test.items() if k != "id")), test)
    full = "\n\n".join([t for _, t in furniture] + [text])
    return MinedPage(reference=format_page_output(front, text), body=text, front_matter=front,
                     tests=list(unique.values()), full_text=full)

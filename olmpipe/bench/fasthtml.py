"""A fast HTML tree for the table test, equal to BeautifulSoup's ``html.parser`` tree on simple markup.

BeautifulSoup builds its tree at about 2 us per character; a page with one large table costs
10-20 ms, most of a table test's time. Model outputs are mostly plain, well-nested table markup,
for which the tree BeautifulSoup (4.x, ``html.parser``) builds is the obvious one. :func:`parse`
builds that tree directly and returns ``None`` -- meaning "use BeautifulSoup" -- whenever the
markup leaves that safe subset:

- every ``<`` followed by a letter, ``/``, ``!`` or ``?`` must start a strict tag: a name from
  :data:`TAGS`, attributes from :data:`ATTRIBUTES` with quoted values (or unquoted ones followed by
  whitespace or ``>``), no ``&`` or angle brackets in values; no comments or declarations;
- an end tag must close the innermost open element (no implied or stray closes);
- from the first ``<table`` on, ``&`` only in ``&amp;``, ``&lt;``, ``&gt;``, ``&quot;``, ``&nbsp;``
  (other character references would need BeautifulSoup's rules).

Within the subset the tree follows BeautifulSoup's rules: tag and attribute names lower-cased,
the last duplicate attribute wins, a value-less attribute is ``""``, ``<br>`` is empty, ``<x/>``
opens and closes ``x``, text is split at every tag, and a text node of ASCII whitespace only
becomes ``"\\n"`` (if it holds a newline) or ``" "``. Nodes offer the few BeautifulSoup methods the
table parser uses (``find_all``, ``find``, ``get``, ``get_text``, ``replace_with``, ``==``).
"""

from __future__ import annotations

import re

TAGS = frozenset({"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "br", "b", "i",
                  "strong", "em", "u", "sup", "sub", "span", "p", "div"})
VOID = frozenset({"br"})
ATTRIBUTES = frozenset({"rowspan", "colspan", "align", "valign", "style", "width", "height", "scope",
                        "id", "border", "cellpadding", "cellspacing", "bgcolor", "nowrap"})
_ASCII_SPACES = "\x20\x0a\x09\x0c\x0d"

_START = re.compile(
    r"<([a-zA-Z][a-zA-Z0-9]*)"
    r"((?:\s+[a-zA-Z][a-zA-Z0-9_-]*(?:\s*=\s*(?:\"[^\"<>&]*\"|'[^'<>&]*'|[a-zA-Z0-9_.%#-]+(?=[\s>])))?)*)"
    r"\s*(/?)>"
)
_ATTR = re.compile(r"([a-zA-Z][a-zA-Z0-9_-]*)(?:\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+))?")
_END = re.compile(r"</([a-zA-Z][a-zA-Z0-9]*)\s*>")


class Node:
    """An element: ``name``, ``attrs`` and ``contents`` (child nodes and ``str`` text)."""

    __slots__ = ("attrs", "contents", "name", "parent")

    def __init__(self, name: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.name, self.attrs, self.contents, self.parent = name, attrs, [], parent

    def _descendants(self):
        stack = list(reversed(self.contents))
        while stack:
            node = stack.pop()
            yield node
            if isinstance(node, Node):
                stack.extend(reversed(node.contents))

    def find_all(self, names) -> list[Node]:
        names = {names} if isinstance(names, str) else set(names)
        return [n for n in self._descendants() if isinstance(n, Node) and n.name in names]

    def find(self, name: str) -> Node | None:
        for n in self._descendants():
            if isinstance(n, Node) and n.name == name:
                return n
        return None

    def get(self, key: str, default=None):
        return self.attrs.get(key, default)

    def get_text(self) -> str:
        return "".join(n for n in self._descendants() if isinstance(n, str))

    def replace_with(self, text: str) -> None:
        siblings = self.parent.contents
        for k, node in enumerate(siblings):
            if node is self:
                siblings[k] = text
                return

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Node):
            return False
        return (self.name == other.name and self.attrs == other.attrs
                and len(self.contents) == len(other.contents)
                and all(a == b for a, b in zip(self.contents, other.contents, strict=True)))

    __hash__ = object.__hash__


def _attrs(raw: str) -> dict[str, str] | None:
    attrs: dict[str, str] = {}
    for m in _ATTR.finditer(raw):
        name = m.group(1).lower()
        if name not in ATTRIBUTES:
            return None
        value = m.group(2)
        if value is None:
            value = ""
        elif value[:1] in ("'", '"'):
            value = value[1:-1]
        attrs[name] = value
    return attrs


_ENTITY = re.compile(r"&(amp|lt|gt|quot|nbsp);")
_ENTITY_CHARS = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "nbsp": "\u00a0"}


def _text(data: str, in_tables: bool) -> str | None:
    """A text node as BeautifulSoup stores it; None when it holds a reference outside the subset."""
    if "&" in data:
        converted = _ENTITY.sub(lambda m: _ENTITY_CHARS[m.group(1)], data)
        if "&" in _ENTITY.sub("", data):
            if in_tables:
                return None
        else:
            data = converted
    if data.strip(_ASCII_SPACES):
        return data
    return "\n" if "\n" in data else " "


def parse(text: str, *, complete: bool = False) -> Node | None:
    """The document's tree (a root :class:`Node`), or None when BeautifulSoup must decide.

    ``complete=True`` also returns None when an element is left open at the end.
    """
    start_of_tables = text.lower().find("<table")
    if start_of_tables < 0:
        start_of_tables = len(text)

    def add_text(start: int, end: int) -> bool:
        node = _text(text[start:end], end > start_of_tables)
        if node is None:
            return False
        stack[-1].contents.append(node)
        return True

    root = Node("[document]", {}, None)
    stack = [root]
    pos, n = 0, len(text)
    data_start = 0
    while True:
        lt = text.find("<", pos)
        if lt < 0 or lt + 1 >= n:
            break
        nxt = text[lt + 1]
        if nxt in "!?":
            return None
        if nxt == "/":
            m = _END.match(text, lt)
            if m is None:
                return None
            name = m.group(1).lower()
            if name not in TAGS or name in VOID or stack[-1].name != name:
                return None
            if lt > data_start and not add_text(data_start, lt):
                return None
            stack.pop()
        elif nxt.isascii() and nxt.isalpha():
            m = _START.match(text, lt)
            if m is None:
                return None
            name = m.group(1).lower()
            attrs = _attrs(m.group(2))
            if name not in TAGS or attrs is None:
                return None
            if lt > data_start and not add_text(data_start, lt):
                return None
            node = Node(name, attrs, stack[-1])
            stack[-1].contents.append(node)
            if name not in VOID and not m.group(3):
                stack.append(node)
        else:
            pos = lt + 1  # a lone "<" is text
            continue
        pos = data_start = m.end()
    if n > data_start and not add_text(data_start, n):
        return None
    if complete and len(stack) > 1:
        return None
    return root


_TABLE_TAG = re.compile(r"<(/?)table(?![a-zA-Z0-9])", re.IGNORECASE)
PLACEHOLDER = "<table></table>"


def split_tables(text: str) -> tuple[str, list[str]] | None:
    """``(outline, tables)``: the markup of each top-level ``<table>...</table>`` and the document
    with each replaced by :data:`PLACEHOLDER`; None when the table tags do not pair up.

    The tree of the document is in the fast subset iff the outline's and every table's
    (``parse(table, complete=True)``) are, and each table's subtree is then the tree of its
    markup alone: a balanced, in-subset table closes only its own elements, text inside it is
    after the document's first ``<table`` either way, and the placeholder keeps the outline's
    element stack and first-table position. So the tables of a page can be parsed (and
    remembered) one table markup at a time, and near-identical pages share that work.
    """
    tables: list[str] = []
    outline: list[str] = []
    depth, start, done = 0, 0, 0
    for m in _TABLE_TAG.finditer(text):
        if not m.group(1):
            if depth == 0:
                start = m.start()
            depth += 1
            continue
        if depth == 0:
            return None
        depth -= 1
        if depth == 0:
            end = _END.match(text, m.start())
            if end is None:
                return None
            outline += [text[done:start], PLACEHOLDER]
            tables.append(text[start:end.end()])
            done = end.end()
    if depth:
        return None
    outline.append(text[done:])
    return "".join(outline), tables

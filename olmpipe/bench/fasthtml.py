"""A fast HTML tree for the table test, equal to BeautifulSoup's ``html.parser`` tree on simple markup.

BeautifulSoup builds its tree at about 2 us per character; a page with one large table costs
10-20 ms, most of a table test's time. Model outputs are mostly plain, well-nested table markup,
for which the tree BeautifulSoup (4.x, ``html.parser``) builds is the obvious one. :func:`parse`
builds that tree directly and returns ``None`` -- meaning "use BeautifulSoup" -- whenever the
markup leaves that safe subset:

- every ``<`` followed by a letter, ``/``, ``!`` or ``?`` must start a strict tag: a name from
  :data:`TAGS`, attributes from :data:`ATTRIBUTES` with quoted values (or unquoted ones followed by
  whitespace or ``>``), no ``&`` or angle brackets in values; no comments or declarations;
- an end tag must close the innermost open element (no implied or stray closes); elements nest at
  most :data:`MAX_DEPTH` deep (the tree walks recurse);
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
MAX_DEPTH = 100  # deeper element nesting than this is left to BeautifulSoup
_ASCII_SPACES = "\x20\x0a\x09\x0c\x0d"

_ATTRS = r"((?:\s+[a-zA-Z][a-zA-Z0-9_-]*(?:\s*=\s*(?:\"[^\"<>&]*\"|'[^'<>&]*'|[a-zA-Z0-9_.%#-]+(?=[\s>])))?)*)"
_START = re.compile(r"<([a-zA-Z][a-zA-Z0-9]*)" + _ATTRS + r"\s*(/?)>")
# one token per match: an end tag (group 1), a start tag (groups 2-4), or a "<" that starts
# markup outside the subset (group 5); a "<" matching none of them is text
_TOKEN = re.compile(r"<(?:/([a-zA-Z][a-zA-Z0-9]*)\s*>|([a-zA-Z][a-zA-Z0-9]*)" + _ATTRS + r"\s*(/?)>|([/!?a-zA-Z]))")
_ATTR = re.compile(r"([a-zA-Z][a-zA-Z0-9_-]*)(?:\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+))?")
_END = re.compile(r"</([a-zA-Z][a-zA-Z0-9]*)\s*>")


class Node:
    """An element: ``name``, ``attrs`` and ``contents`` (child nodes and ``str`` text)."""

    __slots__ = ("attrs", "contents", "has_elements", "name", "parent")

    def __init__(self, name: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.name, self.attrs, self.contents, self.parent = name, attrs, [], parent
        self.has_elements = False  # whether an element was ever added below (walks skip text-only nodes)

    def _collect(self, names, out: list, first: bool) -> bool:
        """Append descendant elements named in ``names`` to ``out`` in document order; with
        ``first``, stop at the first one (returns True once found)."""
        for node in self.contents:
            if node.__class__ is Node:
                if node.name in names:
                    out.append(node)
                    if first:
                        return True
                if node.has_elements and node._collect(names, out, first) and first:
                    return True
        return False

    def find_all(self, names) -> list[Node]:
        out: list[Node] = []
        self._collect({names} if isinstance(names, str) else set(names), out, False)
        return out

    def find(self, name: str) -> Node | None:
        out: list[Node] = []
        self._collect({name}, out, True)
        return out[0] if out else None

    def get(self, key: str, default=None):
        return self.attrs.get(key, default)

    def get_text(self) -> str:
        parts: list[str] = []
        self._texts(parts)
        return "".join(parts)

    def _texts(self, out: list[str]) -> None:
        for node in self.contents:
            if node.__class__ is Node:
                node._texts(out)
            else:
                out.append(node)

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
    if not raw:
        return attrs
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
        data = text[start:end]
        if "&" in data or not data.strip(_ASCII_SPACES):
            data = _text(data, end > start_of_tables)
            if data is None:
                return False
        stack[-1].contents.append(data)
        return True

    root = Node("[document]", {}, None)
    stack = [root]
    n = len(text)
    data_start = 0
    for m in _TOKEN.finditer(text):
        end_name, raw_name, raw_attrs, self_closing, outside = m.groups()
        if outside is not None:
            return None
        lt = m.start()
        if lt > data_start and not add_text(data_start, lt):
            return None
        if end_name is not None:
            name = end_name.lower()
            if name not in TAGS or name in VOID or stack[-1].name != name:
                return None
            stack.pop()
        else:
            name = raw_name.lower()
            attrs = _attrs(raw_attrs) if raw_attrs else {}
            if name not in TAGS or attrs is None:
                return None
            parent = stack[-1]
            node = Node(name, attrs, parent)
            parent.contents.append(node)
            parent.has_elements = True
            if name not in VOID and not self_closing:
                if len(stack) > MAX_DEPTH:  # the tree walks recurse; deep markup goes to BeautifulSoup
                    return None
                stack.append(node)
        data_start = m.end()
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

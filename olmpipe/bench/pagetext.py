"""The per-page cache of a completion's derived text forms, shared by all tests of the page.

:class:`PageText` holds one completion's text and computes each derived form (normalized,
lower-cased, parsed markdown and HTML tables) at most once, so that running ten tests on a page
normalizes and parses it once instead of ten times. It imports both :mod:`olmpipe.bench.normalize`
and :mod:`olmpipe.bench.tables` (which normalizes cells with the former) and neither imports it, so
the three form no import cycle.
"""

from __future__ import annotations

from functools import cached_property

from olmpipe.bench.normalize import coerce_text, normalize_text
from olmpipe.bench.tables import TableData, parse_html_tables, parse_markdown_tables


class PageText:
    """One completion's text with lazily computed, cached derived forms.

    Every check reads the forms it needs from here, so each is computed at most once per page no
    matter how many tests run on it.

    >>> page = PageText("**A**  b")
    >>> page.raw, page.normalized, page.normalized_lower
    ('**A**  b', 'A b', 'a b')
    """

    def __init__(self, raw: object) -> None:
        self.raw: str = coerce_text(raw)

    @cached_property
    def normalized(self) -> str:
        """The page through :func:`~olmpipe.bench.normalize.normalize_text` (present/absent/order tests)."""
        return normalize_text(self.raw)

    @cached_property
    def normalized_lower(self) -> str:
        """:attr:`normalized`, lower-cased (case-insensitive present/absent tests)."""
        return self.normalized.lower()

    @cached_property
    def tables(self) -> list[TableData]:
        """Markdown tables (see :mod:`olmpipe.bench.tables`), parsed once."""
        return parse_markdown_tables(self.raw)

    @cached_property
    def html_tables(self) -> list[TableData] | Exception:
        """HTML tables, parsed once; an exception the parser raises is kept and re-raised to each test."""
        try:
            return parse_html_tables(self.raw)
        except Exception as exc:  # noqa: BLE001 - the reference fails every table test of the page
            return exc

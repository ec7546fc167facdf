"""Text normalization of olmOCR-Bench and the per-page cache that applies it once.

The reference (olmocr 0.4.27, ``olmocr/bench/tests.py::normalize_text``) normalizes both the test
strings (at load time) and the page text (once per test, at run time) with the same steps, in this
order:

1. ``<br>`` / ``<br/>`` become a space;
2. every run of whitespace becomes one space (so the later ``.`` patterns never meet a newline);
3. markdown bold (``**x**``, ``__x__``) and ``<b>``/``<i>`` tags are stripped;
4. markdown italics (``*x*``, ``_x_``) are stripped;
5. Unicode NFC;
6. typographic quotes, dashes, the full-width low line and the micro sign become ASCII / mu.

:class:`PageText` holds one completion's text and computes each derived form (normalized,
lower-cased, parsed tables, ...) at most once, so that running ten tests on a page normalizes it
once instead of ten times.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cached_property

_BR = re.compile(r"<br/?>")
_BOLD_STARS = re.compile(r"\*\*(.*?)\*\*")
_BOLD_UNDERSCORES = re.compile(r"__(.*?)__")
_B_TAG = re.compile(r"</?b>")
_I_TAG = re.compile(r"</?i>")
_ITALIC_STAR = re.compile(r"\*(.*?)\*")
_ITALIC_UNDERSCORE = re.compile(r"_(.*?)_")

# fancy character -> ASCII (or Greek mu for the micro sign); every key and value is one character
# and no value is a key, so the order of the replacements does not matter.
_REPLACEMENTS = (
    ("\u2018", "'"),
    ("\u2019", "'"),
    ("\u201a", "'"),
    ("\u201c", '"'),
    ("\u201d", '"'),
    ("\u201e", '"'),
    ("\uff3f", "_"),
    ("\u2013", "-"),
    ("\u2014", "-"),
    ("\u2011", "-"),
    ("\u2012", "-"),
    ("\u2212", "-"),
    ("\u00b5", "\u03bc"),
)


def collapse_whitespace(text: str) -> str:
    """``re.sub(r"\\s+", " ", text)``, faster: ``str.split`` and ``\\s`` use the same whitespace."""
    parts = text.split()
    if not parts:
        return " " if text else ""
    out = " ".join(parts)
    if text[0].isspace():
        out = " " + out
    if text[-1].isspace():
        out += " "
    return out


def normalize_text(text: str | None) -> str | None:
    """Normalize ``text`` exactly as olmOCR-Bench does before fuzzy matching (``None`` stays ``None``).

    Each step runs only when its trigger character is present (a step without it changes nothing).

    >>> normalize_text("**Bold**  and\\n_italic_ \\u2014 \\u201cquoted\\u201d")
    'Bold and italic - "quoted"'
    """
    if text is None:
        return None
    has_tag = "<" in text
    if has_tag:
        text = _BR.sub(" ", text)
    text = collapse_whitespace(text)
    if "*" in text:
        text = _BOLD_STARS.sub(r"\1", text)
    if "_" in text:
        text = _BOLD_UNDERSCORES.sub(r"\1", text)
    if has_tag:
        text = _B_TAG.sub("", text)
        text = _I_TAG.sub("", text)
    if "*" in text:
        text = _ITALIC_STAR.sub(r"\1", text)
    if "_" in text:
        text = _ITALIC_UNDERSCORE.sub(r"\1", text)
    if text.isascii():
        return text  # NFC and the replacements only touch non-ASCII characters
    text = unicodedata.normalize("NFC", text)
    for fancy, plain in _REPLACEMENTS:
        if fancy in text:
            text = text.replace(fancy, plain)
    return text


def coerce_text(text: object) -> str:
    """Turn whatever a model or a file produced into a ``str`` the checks can read.

    ``None`` becomes ``""``; ``bytes`` are decoded as UTF-8 with replacement; a chat-style completion
    (``[{"role": ..., "content": ...}]``) yields its first message's content, as the reference GRPO
    reward does; anything else goes through ``str``.
    """
    if isinstance(text, str):
        return text
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", errors="replace")
    if isinstance(text, list) and text and isinstance(text[0], dict):
        return coerce_text(text[0].get("content"))
    return str(text)


class PageText:
    """One completion's text with lazily computed, cached derived forms.

    Every check reads the forms it needs from here, so each is computed at most once per page no
    matter how many tests run on it.
    """

    def __init__(self, raw: object) -> None:
        self.raw: str = coerce_text(raw)

    @cached_property
    def normalized(self) -> str:
        """The page through :func:`normalize_text` (present/absent/order tests)."""
        return normalize_text(self.raw)

    @cached_property
    def normalized_lower(self) -> str:
        """:attr:`normalized`, lower-cased (case-insensitive present/absent tests)."""
        return self.normalized.lower()

    @cached_property
    def tables(self):
        """Markdown tables (see :mod:`olmpipe.bench.tables`), parsed once."""
        from olmpipe.bench.tables import parse_markdown_tables

        return parse_markdown_tables(self.raw)

    @cached_property
    def html_tables(self):
        """HTML tables, parsed once; an exception the parser raises is kept and re-raised to each test."""
        from olmpipe.bench.tables import parse_html_tables

        try:
            return parse_html_tables(self.raw)
        except Exception as exc:  # noqa: BLE001 - the reference fails every table test of the page
            return exc

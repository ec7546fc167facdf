"""Text normalization of olmOCR-Bench, and the coercion of model output to text it starts from.

The reference (olmocr 0.4.27, ``olmocr/bench/tests.py::normalize_text``) normalizes both the test
strings (at load time) and the page text (once per test, at run time) with the same steps, in this
order:

1. ``<br>`` / ``<br/>`` become a space;
2. every run of whitespace becomes one space (so the later ``.`` patterns never meet a newline);
3. markdown bold (``**x**``, ``__x__``) and ``<b>``/``<i>`` tags are stripped;
4. markdown italics (``*x*``, ``_x_``) are stripped;
5. Unicode NFC;
6. typographic quotes, dashes, the full-width low line and the micro sign become ASCII / mu.

:class:`olmpipe.bench.pagetext.PageText` applies it once per page and caches the result (with the
page's parsed tables) for all tests of the page.
"""

from __future__ import annotations

import re
import unicodedata

from olmpipe.records.text import completion_text

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

    Strings, ``None`` (``""``), bytes and chat-style completions (``[{"role": ..., "content": ...}]``)
    go through :func:`olmpipe.records.text.completion_text`, the reduction the rewards use: the
    messages' text joined, which for TRL's one-message completions is the first message's content,
    as the reference GRPO reward reads it. Anything else goes through ``str``.
    """
    if isinstance(text, str):
        return text
    out = completion_text(text)
    if out is not None:
        return out
    if text is None or (isinstance(text, list) and text and isinstance(text[0], dict)):
        return ""
    return str(text)

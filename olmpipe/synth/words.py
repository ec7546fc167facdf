"""Source ``words`` of ``synth_html``: generated pages of a few large words from a small vocabulary.

A task a tiny model can learn to read on a laptop (README "A run that learns", ``config/learn.yaml``):
``synth.words.vocabulary`` made-up words of ``letters`` lowercase letters, drawn once from
``synth.seed``, and ``pages`` pages of ``lines`` lines, each line one word of the vocabulary (no
word twice on a page, so every ``order`` test the miner draws has one right answer; with
``in_order`` the words of a page keep the vocabulary's order), printed at
``font_px`` CSS pixels on a ``synth.page_width_pt`` x ``synth.page_height_pt`` page. The miner then
finds one block per line: ``order`` tests (pairs of lines; a word needs 5 letters or more to get one,
``olmpipe.synth.mine``) and the ``baseline`` test; ``present`` tests need sentences of 20
characters, so these pages get none.

    >>> vocabulary(4, 5, seed=0) == vocabulary(4, 5, seed=0), len(vocabulary(4, 5, seed=0))
    (True, 4)
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping
from typing import Any

#: The page: one ``<p>`` per line, in a font every Chromium has, black on white, no margins left to chance.
PAGE_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><style>
html, body {{ margin: 0; padding: 0; background: #fff; }}
body {{ padding: {pad}px {pad}px; font-family: "DejaVu Sans", sans-serif; font-size: {font}px;
       line-height: 1.15; color: #000; }}
p {{ margin: 0; }}
</style></head><body>
{lines}
</body></html>
"""


def vocabulary(size: int, letters: int, *, seed: int) -> list[str]:
    """``size`` distinct made-up words of ``letters`` lowercase letters, the same for the same seed."""
    if size > 26**letters:
        raise ValueError(f"synth.words: {size} distinct words of {letters} letters do not exist")
    rng = random.Random(f"{seed}:words:vocabulary")
    words: dict[str, None] = {}
    while len(words) < size:
        words.setdefault("".join(rng.choice(string.ascii_lowercase) for _ in range(letters)))
    return list(words)


def page_words(vocab: list[str], lines: int, *, seed: int, index: int, in_order: bool = False) -> list[str]:
    """The words of page ``index``: ``lines`` distinct words of ``vocab`` in a seeded order, or in the
    vocabulary's order with ``in_order``."""
    if lines > len(vocab):
        raise ValueError(f"synth.words.lines ({lines}) is more than the vocabulary ({len(vocab)} words): a page "
                         f"holds no word twice")
    words = random.Random(f"{seed}:words:page:{index}").sample(vocab, lines)
    return sorted(words, key=vocab.index) if in_order else words


def word_pages(synth: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(name, html)`` of every page of ``synth.words`` (names ``words_0000``, ...)."""
    spec = synth["words"]
    vocab = vocabulary(spec["vocabulary"], spec["letters"], seed=synth["seed"])
    pad = max(2, spec["font_px"] // 4)
    out = []
    for index in range(spec["pages"]):
        words = page_words(vocab, spec["lines"], seed=synth["seed"], index=index, in_order=spec["in_order"])
        lines = "\n".join(f"<p>{word}</p>" for word in words)
        out.append((f"words_{index:04d}", PAGE_HTML.format(pad=pad, font=spec["font_px"], lines=lines)))
    return out

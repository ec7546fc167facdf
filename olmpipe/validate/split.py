"""Seeded split of a bench's PDFs into train and eval.

Whole documents go to one side, so no page of an eval PDF is ever trained on. The rule only
depends on the seed and the PDF ids (not on file order or the machine): each PDF is ranked by
``sha256(f"{seed}:{pdf}")`` and the first ``round(eval_fraction * n)`` PDFs are eval. Adding
one PDF therefore moves at most one other PDF across the split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal

Split = Literal["train", "eval"]


def eval_count(n_pdfs: int, eval_fraction: float) -> int:
    """How many of ``n_pdfs`` PDFs go to eval.

    ``round(eval_fraction * n)``, but at least one PDF on each side when there are two or more
    PDFs and the fraction is strictly between 0 and 1.

    >>> eval_count(21, 0.3), eval_count(2, 0.01), eval_count(2, 0.99), eval_count(5, 0.0)
    (6, 1, 1, 0)
    """
    if not 0.0 <= eval_fraction <= 1.0:
        raise ValueError(f"eval_fraction must lie in [0, 1], got {eval_fraction}")
    count = round(eval_fraction * n_pdfs)
    if 0.0 < eval_fraction < 1.0 and n_pdfs >= 2:
        count = min(max(count, 1), n_pdfs - 1)
    return count


def _rank_key(seed: int, pdf: str) -> str:
    return hashlib.sha256(f"{seed}:{pdf}".encode()).hexdigest()


def split_pdfs(pdfs: Iterable[str], *, eval_fraction: float, seed: int) -> dict[str, Split]:
    """Assign each PDF id to ``"train"`` or ``"eval"``.

    >>> split = split_pdfs(["a.pdf", "b.pdf", "c.pdf", "d.pdf"], eval_fraction=0.5, seed=0)
    >>> sorted(split.values())
    ['eval', 'eval', 'train', 'train']
    """
    unique = sorted(set(pdfs))
    ranked = sorted(unique, key=lambda pdf: _rank_key(seed, pdf))
    n_eval = eval_count(len(unique), eval_fraction)
    eval_set = set(ranked[:n_eval])
    return {pdf: ("eval" if pdf in eval_set else "train") for pdf in unique}

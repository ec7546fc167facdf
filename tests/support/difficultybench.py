"""A bench with a known mix of easy, hard and informative pages, and a scripted OCR model for it.

For the difficulty stage's tests and its benchmark (``benchmarks/difficulty.py``): what is measured
is the pipeline (sampling through the generation engine, the trainer's real rewards, the filter),
so the model is a :class:`ScriptedOCR` backend whose answers have a known pass probability per page:

- ``easy`` pages: every answer contains both of the page's sentences (every ``present`` test passes);
- ``hard`` pages: no answer contains them (every test fails);
- ``informative`` pages: each sentence is in the answer with probability ``p``, drawn from the
  request's seed (so a page's k answers differ, reproducibly).

Every answer carries valid front matter and ends with EOS, so the format rewards are constant and
the spread of a page's total reward is the spread of its unit-test reward. Pages live in two JSONL
files (``arxiv.jsonl``: two ``present`` tests per page; ``scans.jsonl``: the same plus an ``absent``
test the answers never fail), kinds interleaved over both.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from olmpipe.generate.base import Completion, GenerationBackend, PageRequest, Sampling

FRONT = ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
         "is_diagram: False\n---\n")
KINDS = ("easy", "hard", "informative")


def sentences(pdf: str) -> tuple[str, str]:
    """The two sentences of a page's ``present`` tests."""
    stem = pdf.removesuffix(".pdf")
    return (f"The {stem} report opens with its first finding.", f"Its second finding closes the {stem} page.")


def page_kinds(mix: Mapping[str, int]) -> dict[str, str]:
    """pdf -> kind for ``mix`` (kind -> number of pages), kinds interleaved (``p000.pdf``, ``p001.pdf``, ...)."""
    pool = [kind for kind in KINDS for _ in range(int(mix.get(kind, 0)))]
    random.Random(0).shuffle(pool)
    return {f"p{i:03d}.pdf": kind for i, kind in enumerate(pool)}


def make_mixed_bench(root: Path, mix: Mapping[str, int], *, eval_pages: int = 1) -> tuple[Path, Path, dict[str, str]]:
    """Write ``root/pages.jsonl`` (train pages of ``mix`` + ``eval_pages`` eval pages) and
    ``root/tests/{arxiv,scans}.jsonl``; returns (page index, tests folder, pdf -> kind of the train pages)."""
    from PIL import Image

    kinds = page_kinds(mix)
    tests_dir = root / "tests"
    tests_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[dict]] = {"arxiv.jsonl": [], "scans.jsonl": []}
    lines = []
    pdfs = list(kinds) + [f"e{i:03d}.pdf" for i in range(eval_pages)]
    for i, pdf in enumerate(pdfs):
        jsonl = "arxiv.jsonl" if i % 2 == 0 else "scans.jsonl"
        a, b = sentences(pdf)
        tests = [{"pdf": pdf, "page": 1, "id": f"{pdf}-a", "type": "present", "text": a},
                 {"pdf": pdf, "page": 1, "id": f"{pdf}-b", "type": "present", "text": b}]
        if jsonl == "scans.jsonl":
            tests.append({"pdf": pdf, "page": 1, "id": f"{pdf}-h", "type": "absent", "text": "CONFIDENTIAL HEADER"})
        files[jsonl] += tests
        image = root / "pages" / f"{pdf}.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (64, 80), (255, (7 * i) % 256, 250)).save(image)
        lines.append({"pdf": pdf, "page": 1, "image": str(image), "split": "train" if pdf in kinds else "eval",
                      "bench_dir": str(root), "test_ids": [t["id"] for t in tests],
                      "jsonl_files": {t["id"]: jsonl for t in tests}, "types": {t["id"]: t["type"] for t in tests}})
    for name, tests in files.items():
        (tests_dir / name).write_text("".join(json.dumps(t) + "\n" for t in tests), encoding="utf-8")
    pages = root / "pages.jsonl"
    pages.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return pages, tests_dir, kinds


class ScriptedOCR(GenerationBackend):
    """Answers pages of :func:`make_mixed_bench` by kind (see the module docstring); counts its calls."""

    name = "scripted"

    def __init__(self, kinds: Mapping[str, str], p: float = 0.5):
        super().__init__()
        self.kinds = dict(kinds)
        self.p = float(p)
        self.requests = 0

    def answer(self, pdf: str, seed: int) -> str:
        """The answer to page ``pdf`` for a request seeded ``seed``."""
        a, b = sentences(pdf)
        kind = self.kinds.get(pdf, "easy")
        if kind == "easy":
            keep = (True, True)
        elif kind == "hard":
            keep = (False, False)
        else:
            rng = random.Random(seed)
            keep = (rng.random() < self.p, rng.random() < self.p)
        body = " ".join(s for s, k in zip((a, b), keep, strict=True) if k) or "unreadable"
        return FRONT + body

    def generate(self, requests: Sequence[PageRequest], sampling: Sequence[Sampling]) -> list[Completion]:
        self.requests += len(requests)
        return [Completion(self.answer(r.pdf, s.seed), "stop", prompt_tokens=10, completion_tokens=20)
                for r, s in zip(requests, sampling, strict=True)]

"""Hand-made scored runs for testing the comparison, the plots and the report without a model.

:func:`make_run` writes a run folder in the layout of the baseline/evaluate stages
(``candidate/*.md``, ``generations.jsonl``, ``verdicts.jsonl``) from page texts chosen by hand,
over a tiny bench of two categories written by :func:`make_bench`. The verdicts and
``scores.json`` come from scoring the texts with the real unit-test engine
(:func:`olmpipe.bench.score_candidate`), so the pass patterns documented in
``tests/test_compare.py`` are what olmOCR-Bench's tests say about these texts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

# (pdf, page) -> text of each repeat (repeats are numbered from 1, as in `_repeat1.md`)
PageTexts = Mapping[tuple[str, int], Sequence[str]]

TESTS = {
    "a.jsonl": [
        {"pdf": "doc1.pdf", "page": 1, "id": "a1", "type": "present", "text": "alpha"},
        {"pdf": "doc1.pdf", "page": 1, "id": "a2", "type": "present", "text": "beta"},
        {"pdf": "doc2.pdf", "page": 1, "id": "a3", "type": "present", "text": "gamma"},
        {"pdf": "doc2.pdf", "page": 1, "id": "a4", "type": "absent", "text": "junk"},
    ],
    "b.jsonl": [
        {"pdf": "doc3.pdf", "page": 1, "id": "b1", "type": "present", "text": "delta"},
        {"pdf": "doc3.pdf", "page": 1, "id": "b2", "type": "absent", "text": "noise"},
    ],
}

BASELINE_TEXTS: dict[tuple[str, int], list[str]] = {
    ("doc1.pdf", 1): ["alpha x", "alpha y", "beta z"],
    ("doc2.pdf", 1): ["junk text"] * 3,
    ("doc3.pdf", 1): ["noise"] * 3,
}
TRAINED_TEXTS: dict[tuple[str, int], list[str]] = {
    ("doc1.pdf", 1): ["alpha beta"] * 3,
    ("doc2.pdf", 1): ["gamma"] * 3,
    ("doc3.pdf", 1): ["delta", "noise", ""],
}


def make_bench(root: Path) -> Path:
    """Write the tiny bench (``a.jsonl``, ``b.jsonl``) under ``root/bench`` once; return its path."""
    bench = root / "bench"
    if not bench.exists():
        bench.mkdir(parents=True)
        for name, tests in TESTS.items():
            (bench / name).write_text("".join(json.dumps(t) + "\n" for t in tests), encoding="utf-8")
    return bench


def make_page_images(root: Path, pages: Collection[tuple[str, int]]) -> Path:
    """Write a small PNG per page and a ``pages.jsonl`` page index pointing at them; return it."""
    from PIL import Image, ImageDraw

    index = root / "pages.jsonl"
    lines = []
    for pdf, page in sorted(pages):
        img_path = root / "images" / f"{pdf[:-4]}_pg{page}.png"
        img_path.parent.mkdir(parents=True, exist_ok=True)
        img = Image.new("RGB", (120, 160), "white")
        ImageDraw.Draw(img).text((10, 10), f"{pdf} p{page}", fill="black")
        img.save(img_path)
        tests = [t for ts in TESTS.values() for t in ts if t["pdf"] == pdf and t["page"] == page]
        lines.append({
            "pdf": pdf, "page": page, "image": str(img_path), "split": "eval",
            "bench_dir": str(root / "bench"),
            "test_ids": [t["id"] for t in tests],
            "jsonl_files": {t["id"]: n for n, ts in TESTS.items() for t in ts if t in tests},
            "types": {t["id"]: t["type"] for t in tests},
        })  # fmt: skip
    index.write_text("".join(json.dumps(rec) + "\n" for rec in lines), encoding="utf-8")
    return index


def _score(bench: Path, candidate: Path) -> Any:
    """Score the candidate folder with the real engine (:func:`olmpipe.bench.score_candidate`)."""
    from olmpipe.bench import load_tests, read_candidate, score_candidate

    tests = [t for jsonl in sorted(bench.glob("*.jsonl")) for t in load_tests(jsonl)]
    return score_candidate(tests, read_candidate(candidate, sorted({t.pdf for t in tests})))


def make_run(
    root: Path,
    name: str,
    texts: PageTexts,
    lose_front_matter: Collection[tuple[str, int, int]] = (),
    finish_length: Collection[tuple[str, int, int]] = (),
) -> Path:
    """Write ``root/name`` as a scored run folder and return it.

    ``lose_front_matter`` and ``finish_length`` list (pdf, page, repeat) whose generation has no
    parsed front matter, or stopped at the length limit instead of EOS.
    """
    bench = make_bench(root)
    run = root / name
    candidate = run / "candidate"
    candidate.mkdir(parents=True, exist_ok=True)
    generations = []
    for (pdf, page), repeats in sorted(texts.items()):
        for k, text in enumerate(repeats, 1):
            (candidate / f"{pdf[:-4]}_pg{page}_repeat{k}.md").write_text(text, encoding="utf-8")
            key = (pdf, page, k)
            lost = key in lose_front_matter
            generations.append({
                "pdf": pdf, "page": page, "repeat": k, "text": text,
                "front_matter": None if lost else {"primary_language": "en", "is_table": False},
                "front_matter_error": "no front matter" if lost else None,
                "finish_reason": "length" if key in finish_length else "stop",
                "attempts": 1, "prompt_tokens": 10, "completion_tokens": len(text), "seconds": 0.1,
                "failed": False,
            })  # fmt: skip
    (run / "generations.jsonl").write_text(
        "".join(json.dumps(g) + "\n" for g in generations), encoding="utf-8"
    )
    score = _score(bench, candidate)
    (run / "scores.json").write_text(json.dumps(score.to_json(), indent=2) + "\n", encoding="utf-8")
    (run / "verdicts.jsonl").write_text(
        "".join(json.dumps(v.to_dict()) + "\n" for v in score.verdicts), encoding="utf-8"
    )
    return run


def make_upstream_results(workdir: Path, model_name: str, seeds: Sequence[int] = (0, 1)) -> None:
    """Lay out, under ``workdir/results``, what the stages before evaluate's comparison write.

    Hand-made baseline and evaluate run folders, the validated tests, a page index with images,
    a training folder with ``metrics.jsonl`` (and its copy in ``model/``) per seed and a (dummy) soup folder: enough for the
    workflow's ``evaluate_compare``, ``report_plots`` and ``report_html`` rules to run for real.
    """
    import shutil

    results = workdir / "results"
    scratch = workdir / "handmade"
    base = make_run(scratch, "baseline", BASELINE_TEXTS)
    trained = make_run(scratch, "trained", TRAINED_TEXTS, lose_front_matter={("doc1.pdf", 1, 1)},
                       finish_length={("doc3.pdf", 1, 3)})  # fmt: skip
    for stage, run in (("baseline", base), ("evaluate", trained)):
        target = results / stage / model_name
        shutil.copytree(run, target)
        (target / "scores.csv").write_text("scope,name,score,ci95_low,ci95_high\n", encoding="utf-8")
        (target / "summary.json").write_text("{}\n", encoding="utf-8")
    shutil.copytree(scratch / "bench", results / "validate" / "tests")
    index = make_page_images(scratch, BASELINE_TEXTS.keys())
    (results / "validate" / "pages.jsonl").write_text(index.read_text(encoding="utf-8"), encoding="utf-8")
    (results / "validate" / "report.json").write_text('{"problems": []}\n', encoding="utf-8")
    for k, seed in enumerate(seeds):
        run_dir = results / "train" / f"seed{seed}"
        (run_dir / "model").mkdir(parents=True)
        rows = [{"step": s, "reward": min(1.0, 0.1 * s + 0.05 * k), "loss": 0.0} for s in range(1, 9)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        shutil.copy2(run_dir / "metrics.jsonl", run_dir / "model.metrics.jsonl")  # train_seed's output
    (results / "train" / "soup" / "model").mkdir(parents=True)
    # make every output newer than its inputs, in stage order, so Snakemake sees them up to date
    order = ["validate", "train/seed", "train/soup", "baseline", "evaluate"]
    stamp = 1_700_000_000
    for path in sorted(results.rglob("*"), key=lambda p: p.relative_to(results).as_posix()):
        rel = path.relative_to(results).as_posix()
        rank = next((k for k, prefix in enumerate(order) if rel.startswith(prefix)), 0)
        os.utime(path, (stamp + 100 * rank, stamp + 100 * rank))

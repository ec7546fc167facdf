"""Generation throughput of the transformers backend on the embedded tiny model, at 1 and 2 threads.

Runs the baseline stage's own code path (:func:`olmpipe.evaluate.engine.run_generation_and_scoring`: page
images, chat template, processor, ``generate``, front matter parsing, journal and candidate I/O,
scoring) on real pages of the bundled sample rendered at 1288 px, with the model loaded once and
injected so that load time is not counted. Prints, per thread count, pages/s (best of
``--rounds``), the ratio to 1 thread measured in the same run, the share of the generation wall
time spent outside ``model.generate`` (image decoding, preprocessing, parsing, I/O), and how much
of it was waiting for page encodings (the backend encodes the next batch in a background thread
while the current one generates, so only what is not overlapped counts)::

    python benchmarks/generate.py                       # 8 pages, embedded-default decoding, 2 rounds
    python benchmarks/generate.py --pages 16 --max-new-tokens 128 --threads 1 2 --json out.json
    python benchmarks/generate.py --model /path/to/Qwen2.5-VL-folder --device cuda --dtype bfloat16
    .venv-vllm/bin/python benchmarks/generate.py --threads 1 --vllm   # + vLLM on the same pages

``--vllm`` (in the environment of ``scripts/setup.sh --vllm``, docs/vllm.md) adds a row for the
vLLM backend on the same pages and settings, through the same stage code, with its engine started
once before timing (as a model is loaded once for transformers); its ratio is to the first
transformers row. vLLM's CPU build uses its own OpenMP threads (``VLLM_CPU_OMP_THREADS_BIND``,
default all cores), not torch's thread count.

The tiny model has random weights, so it never writes EOS: every page runs the whole temperature
ladder (``--temperatures``, default the embedded config's) to ``--max-new-tokens``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from olmpipe.config import load_config


def render_pages(bench: Path, count: int, out: Path, longest_side: int) -> list[dict]:
    """Render the first ``count`` pages of the bench (sorted PDFs) as PNGs; page index entries."""
    import pypdfium2 as pdfium

    from olmpipe.bench.folders import discover_pdfs, pdf_path_for
    from olmpipe.rasterize import render_page

    entries = []
    for stem in discover_pdfs(bench):
        doc = pdfium.PdfDocument(pdf_path_for(bench, stem))
        try:
            for index in range(len(doc)):
                if len(entries) == count:
                    return entries
                image_path = out / "pages" / stem / f"pg{index + 1}.png"
                image_path.parent.mkdir(parents=True, exist_ok=True)
                render_page(doc[index], longest_side).save(image_path)
                entries.append(
                    {"pdf": f"{stem}.pdf", "page": index + 1, "image": str(image_path), "split": "eval"}
                )
        finally:
            doc.close()
    return entries


def write_stage(out: Path, entries: list[dict]) -> tuple[Path, Path]:
    """A page index and one small ``present`` test per page (no math: no browser in the timing)."""
    index = out / "pages.jsonl"
    index.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    tests = out / "tests"
    tests.mkdir(exist_ok=True)
    rows = [
        {"pdf": e["pdf"], "page": e["page"], "id": f"bench_{i}", "type": "present", "text": "the"}
        for i, e in enumerate(entries)
    ]
    (tests / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return index, tests


def time_vllm(cfg: dict, model_path: Path, index: Path, tests: Path, work: Path, rounds: int,
              dtype: str) -> list[dict]:
    """Rounds of the same stage run through the vLLM backend, its engine started once beforehand."""
    from olmpipe.evaluate.engine import run_generation_and_scoring
    from olmpipe.generate.vllm_backend import VLLMBackend

    gen = {**cfg["generation"], "backend": "vllm"}
    gen["vllm"] = {**gen["vllm"], "max_model_len": min(4096, gen["vllm"]["max_model_len"])}
    if dtype != "auto":
        gen["vllm"]["dtype"] = dtype
    t0 = time.perf_counter()
    backend = VLLMBackend.from_config(model_path, gen)
    start = time.perf_counter() - t0
    vcfg = {**cfg, "generation": gen}
    rows = []
    try:
        run_generation_and_scoring(  # warm-up, as for transformers
            {**vcfg, "eval_run": {**cfg["eval_run"], "max_pages": 1}}, model_path, index, tests,
            work / "vllm-warmup", backend=backend, model_name="bench",
        )
        for _ in range(rounds):
            t0 = time.perf_counter()
            summary = run_generation_and_scoring(
                vcfg, model_path, index, tests, work / "vllm", backend=backend, model_name="bench"
            )
            total = time.perf_counter() - t0
            rows.append({
                "pages_per_s": summary.pages_per_s,
                "generation_s": summary.generation_seconds,
                "model_s": summary.model_seconds,
                "outside_share": 1 - summary.model_seconds / summary.generation_seconds,
                "encode_wait_s": 0.0,
                "scoring_and_files_s": total - summary.generation_seconds,
                "engine_start_s": start,
            })
    finally:
        backend.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", default=str(REPO / "data" / "bench" / "olmocr-sample"))
    parser.add_argument(
        "--model", help="model folder (default: build the embedded tiny model in a temp folder)"
    )
    parser.add_argument(
        "--pages", type=int, default=8, help="pages to generate per round (default: %(default)s)"
    )
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts (first is the baseline)"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds per thread count, best kept (default: %(default)s)"
    )
    parser.add_argument("--batch-size", type=int, help="default: the config's generation.batch_size")
    parser.add_argument("--max-new-tokens", type=int, help="default: the config's generation.max_new_tokens")
    parser.add_argument("--temperatures", type=float, nargs="+", help="default: the config's ladder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--longest-side", type=int, default=1288)
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--vllm", action="store_true", help="also time the vLLM backend on the same pages")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import torch

    from olmpipe.evaluate.engine import run_generation_and_scoring
    from olmpipe.generate.transformers_backend import TransformersBackend
    from olmpipe.models.load import load_model_and_processor
    from olmpipe.models.tiny import build_tiny_model

    overrides: dict = {"eval_run": {"resume": False, "progress": False}, "generation": {}}
    for key, value in (
        ("batch_size", args.batch_size),
        ("max_new_tokens", args.max_new_tokens),
        ("temperatures", args.temperatures),
    ):
        if value is not None:
            overrides["generation"][key] = value
    cfg = load_config(overrides=overrides)
    gen = cfg["generation"]

    with tempfile.TemporaryDirectory(prefix="olmpipe-genbench-") as tmp:
        work = Path(tmp)
        model_path = args.model or build_tiny_model(
            work / "model",
            **{k: cfg["model"]["tiny"][k] for k in ("seed", "hidden_size", "num_layers", "vocab_size")},
        )
        entries = render_pages(Path(args.bench), args.pages, work, args.longest_side)
        index, tests = write_stage(work, entries)
        dtype = None if args.dtype == "auto" else args.dtype
        model, processor = load_model_and_processor(model_path, dtype=dtype, device=args.device)
        backend = TransformersBackend(
            model, processor, model_path=str(model_path), batch_size=gen["batch_size"]
        )
        # warm-up: first-call allocations and kernel selection are not part of the steady state
        run_generation_and_scoring(
            {**cfg, "eval_run": {**cfg["eval_run"], "max_pages": 1}},
            model_path,
            index,
            tests,
            work / "warmup",
            backend=backend,
            model_name="bench",
        )
        results = {t: [] for t in args.threads}
        for _ in range(args.rounds):
            for threads in args.threads:  # rounds interleaved, so load changes hit every setting alike
                torch.set_num_threads(threads)
                t0 = time.perf_counter()
                encode_before = backend.encode_seconds
                summary = run_generation_and_scoring(
                    cfg, model_path, index, tests, work / f"run{threads}", backend=backend, model_name="bench"
                )
                total = time.perf_counter() - t0
                results[threads].append(
                    {
                        "pages_per_s": summary.pages_per_s,
                        "generation_s": summary.generation_seconds,
                        "model_s": summary.model_seconds,
                        "outside_share": 1 - summary.model_seconds / summary.generation_seconds,
                        "encode_wait_s": backend.encode_seconds - encode_before,
                        "scoring_and_files_s": total - summary.generation_seconds,
                    }
                )
        backend.close()
        if args.vllm:
            results["vllm"] = time_vllm(cfg, model_path, index, tests, work, args.rounds, args.dtype)

    best = {t: max(rows, key=lambda r: r["pages_per_s"]) for t, rows in results.items()}
    base = best[args.threads[0]]["pages_per_s"]
    print(
        f"transformers backend, {'tiny model' if not args.model else args.model}, device {args.device}, "
        f"{len(entries)} pages at {args.longest_side} px, batch {gen['batch_size']}, "
        f"max_new_tokens {gen['max_new_tokens']}, ladder {gen['temperatures']}, best of {args.rounds}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    header = (
        f"{'threads':>7} {'pages/s':>9} {'vs 1st':>7} {'gen s':>8} {'model s':>8} {'outside':>8} "
        f"{'enc wait s':>10} {'score+io s':>10}"
    )
    print(header)
    print("-" * len(header))
    for t in results:
        r = best[t]
        print(
            f"{t:>7} {r['pages_per_s']:>9.3f} {r['pages_per_s'] / base if base else 0:>6.2f}x "
            f"{r['generation_s']:>8.2f} {r['model_s']:>8.2f} {r['outside_share']:>7.1%} "
            f"{r['encode_wait_s']:>10.2f} {r['scoring_and_files_s']:>10.2f}"
        )
    if "vllm" in best:
        print(f"vllm row: vLLM backend ({best['vllm']['engine_start_s']:.1f} s engine start, not counted)")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"settings": vars(args), "best": best, "rounds": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

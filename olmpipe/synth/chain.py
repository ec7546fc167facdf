"""Where the synthetic bench sits in the workflow, and how it feeds the rest of the chain.

With ``synth.enabled`` the workflow trains on the bench ``synth_tests`` writes
(``results/synth/bench``) and evaluates on the real one: :func:`bench_section` returns the
``bench`` config section the other stages then read, with ``dir`` set to the synthetic bench and
``eval_dir`` to the real eval bench (``bench.eval_dir``, or ``bench.dir`` when that is null). With
a separate eval bench, validate assigns every page of ``dir`` to train and every page of
``eval_dir`` to eval, so no synthetic page is scored in evaluation and no real page is trained on.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

SYNTH_DIR = "results/synth"
SYNTH_BENCH_DIR = f"{SYNTH_DIR}/bench"


def bench_section(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``bench`` section the stages read: unchanged unless ``synth.enabled``.

    >>> cfg = {"bench": {"dir": "data/bench/x", "eval_dir": None, "split": {}}, "synth": {"enabled": True}}
    >>> bench_section(cfg)["dir"], bench_section(cfg)["eval_dir"]
    ('results/synth/bench', 'data/bench/x')
    """
    bench = copy.deepcopy(dict(cfg["bench"]))
    if cfg["synth"]["enabled"]:
        bench["eval_dir"] = bench["eval_dir"] or bench["dir"]
        bench["dir"] = SYNTH_BENCH_DIR
    return bench


def stage_params(synth: Mapping[str, Any]) -> dict[str, Any]:
    """The ``synth`` settings a stage's ``params`` carry: all but ``enabled`` (switching training
    onto the synthetic bench must not rebuild it)."""
    return {k: v for k, v in synth.items() if k != "enabled"}


def source_files(synth: Mapping[str, Any]) -> list[str]:
    """The files ``synth_html`` reads (its Snakemake inputs): the HTML pages of ``html_dir`` or the
    PDFs of ``pdf_dir``; empty when the folder is missing (the stage then says so)."""
    from pathlib import Path

    folder = synth["html_dir"] if synth["source"] == "html" else synth["pdf_dir"]
    suffixes = (".html", ".htm") if synth["source"] == "html" else (".pdf",)
    if not folder or not Path(folder).is_dir():
        return []
    return sorted(str(p) for p in Path(folder).rglob("*") if p.is_file() and p.suffix.lower() in suffixes)


def run_stage(stage: str, log_path: str, synth: Mapping[str, Any], **paths: str) -> None:
    """Run one synth stage for a Snakemake rule, logging to ``log_path``; a failure raises SystemExit
    with the reason (Snakemake shows it and keeps the log)."""
    import logging

    from olmpipe.bench.mathbrowser import BrowserError
    from olmpipe.synth.bench import build_bench, render_pages
    from olmpipe.synth.source import collect_html

    logging.basicConfig(filename=log_path, level=logging.INFO, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if stage == "html":
            collect_html(synth, paths["out"], journal_path=paths["journal"])
        elif stage == "render":
            render_pages(paths["html"], paths["out"], synth)
        else:
            build_bench(paths["html"], paths["render"], paths["out"], paths["report"], synth)
    except (OSError, ValueError, RuntimeError, BrowserError) as exc:
        logging.getLogger("olmpipe.synth").error("%s", exc)
        raise SystemExit(f"synth_{stage}: {exc} (log: {log_path})") from None

"""The jobs of the workflow's file-to-file rules (rasterize, validate, validate_audit, build_model,
download_model, sft_pairs, soup and sft_soup, difficulty_filter, evaluate_compare and
evaluate_sft_compare, report_plots, report_html), each a few lines that unpack the rule's files and
params and call the package, run through the rule's ``shell:`` command::

    python -m olmpipe.rulejobs soup --log logs/soup/soup.log \\
        --files '{"input": {"models": ["results/train/seed0/model"]}, "output": {"model": "results/train/soup/model"}, "threads": 1}' \\
        --param soup '{"dtype": "source"}'

``--files`` is the rule's named inputs and outputs and its threads (common.smk's ``job_files``),
each ``--param NAME JSON`` one of its params (the params stay params: changing one reruns the job),
``--text NAME VALUE`` a plain string param. The job runs inside :func:`olmpipe.rulejob.rule_job`:
its logging and any error that ends it, with the traceback, go to ``--log``, and it ends with one
line naming the rule and the log on standard error (Snakemake's, as for the scripts these jobs
replace; so is standard output, where the audit and the report print their tables).

Why not Snakemake's ``script:``: it starts the interpreter by its path unquoted
(snakemake/script/__init__.py, ``PythonScript.execute_script``: ``py_exec = sys.executable``, then
``"{py_exec} {fname:q}"``; Snakemake 9.27), so a checkout whose ``.venv`` path holds a space fails
there with exit code 127. The ``shell:`` commands quote the interpreter (``{params.python:q}``).
The same stages also run on their own through ``olmpipe <stage>`` (olmpipe/cli.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.rulejob import rule_job

__all__ = ["JOBS", "Job", "main"]


@dataclass(frozen=True)
class Job:
    """One rule's job: its named inputs and outputs (a path, or a list of paths), params, log, threads."""

    rule: str
    input: dict[str, Any]
    output: dict[str, Any]
    params: dict[str, Any]
    log: str
    threads: int
    logger: logging.Logger


def _paths(value: Any) -> list[str]:
    """A named input or output as a list of paths (Snakemake names a list, or one path)."""
    if value in (None, ""):
        return []
    return [value] if isinstance(value, str) else list(value)


def rasterize(job: Job) -> None:
    from olmpipe.rasterize import RasterizeError, rasterize_benches

    try:
        rasterize_benches(
            job.params["benches"],
            job.output["manifest"],
            longest_side=job.params["longest_side"],
            on_error=job.params["on_error"],
            code=job.params["code"],
            workers=job.threads,
        )
    except RasterizeError as exc:
        raise SystemExit(f"rasterize: {exc}\n(set rasterize.on_error: skip to go on without them)") from None


def validate(job: Job) -> None:
    from olmpipe.validate.stage import OutputError, ValidationFailed, run_validate

    try:
        run_validate(
            {"bench": job.params["bench"], "validate": job.params["validate"]},
            manifest_path=job.input["manifest"],
            tests_dir=job.output["tests"],
            report_path=job.output["report"],
            pages_path=job.output["pages"],
        )
    except ValidationFailed as exc:
        # Snakemake deletes the outputs of a failed job: keep the report next to the log.
        log = Path(job.log)
        kept = log.with_name(f"{log.stem}.{Path(job.output['report']).name}")
        shutil.copyfile(job.output["report"], kept)
        raise SystemExit(f"validate: {exc}\nfull report: {kept} (and {job.log})") from None
    except OutputError as exc:
        raise SystemExit(f"validate: {exc}") from None


def validate_audit(job: Job) -> None:
    from olmpipe.validate.audit import AuditError, format_audit, run_audit

    cfg = {
        "rewards": job.params["rewards"],
        "validate": {"audit": job.params["audit"]},
        "train": {"grpo": {"max_completion_length": job.params["max_completion_length"]}},
    }
    try:
        summary = run_audit(cfg, pages_path=job.input["pages"], tests_dir=job.input["tests"],
                            records_path=job.output["records"], summary_path=job.output["summary"])
    except AuditError as exc:
        raise SystemExit(f"validate_audit: {exc}") from None
    table = format_audit(summary)
    job.logger.info("\n%s", table)
    sys.stdout.write(f"\n{table}\n")


def build_model(job: Job) -> None:
    from olmpipe.models.tiny import build_tiny_model

    tiny = job.params["tiny"]
    build_tiny_model(
        job.output["model"],
        seed=tiny["seed"],
        hidden_size=tiny["hidden_size"],
        num_layers=tiny["num_layers"],
        image_mean=tiny["image_mean"],
        num_heads=tiny["num_heads"],
        vocab_size=tiny["vocab_size"],
        architecture=tiny["architecture"],
    )


def download_model(job: Job) -> None:
    from olmpipe.models.hub import ModelDownloadError, download

    try:
        download(job.params["repo"], job.params["revision"], job.output["model"])
    except ModelDownloadError as exc:
        # the refusal says what is wrong and how to fix it; the traceback would add nothing
        raise SystemExit(f"download_model: {exc}\n(log: {job.log})") from None


def sft_pairs(job: Job) -> None:
    from olmpipe.sft.pairs import PairsError, build_pairs

    try:
        build_pairs({"sft": job.params["sft"]}, job.input["pages"], job.output["pairs"], job.output["summary"])
    except PairsError as exc:
        raise SystemExit(f"sft_pairs: {exc}") from None


def soup(job: Job) -> None:
    from olmpipe.train.soup import soup as average

    average(_paths(job.input["models"]), job.output["model"], dtype=job.params["soup"]["dtype"])


def difficulty_filter(job: Job) -> None:
    from olmpipe.difficulty import DifficultyError, FilterSettings, filter_page_index

    try:
        filter_page_index(
            job.input["stats"],
            job.input["pages"],
            job.output["pages"],
            job.output["dropped"],
            job.output["summary"],
            FilterSettings(**job.params["filter"]),
            num_generations=int(job.params["num_generations"]),
            batch_pages=int(job.params["batch_pages"]),
            sampled=job.input["summary"],
        )
    except DifficultyError as exc:
        raise SystemExit(f"difficulty_filter: {exc}") from None


def evaluate_compare(job: Job) -> None:
    from olmpipe.evaluate.compare import ComparisonError, format_table
    from olmpipe.evaluate.stage import compare_folders

    names = job.params["names"]
    try:
        comparison = compare_folders(
            {"model": job.params["model"], "evaluate": job.params["evaluate"]},
            baseline_dir=Path(job.input["baseline_verdicts"]).parent,
            trained_dir=Path(job.input["trained_verdicts"]).parent,
            json_path=job.output["json"],
            csv_path=job.output["csv"],
            baseline_name=names["baseline"],
            trained=names["trained"],
        )
    except ComparisonError as exc:
        raise SystemExit(f"evaluate: {exc}") from None
    job.logger.info("\n%s", format_table(comparison.to_json()))


def report_plots(job: Job) -> None:
    from olmpipe.evaluate.compare import read_comparison
    from olmpipe.report.plots import write_plots

    sft_metrics = _paths(job.input.get("sft_metrics"))
    written = write_plots(
        read_comparison(job.input["comparison"]),
        # results/train/seed{seed}/model.metrics.jsonl (train_seed's copy) -> label seed{seed}
        {Path(m).parent.name: Path(m) for m in _paths(job.input["metrics"])},
        Path(job.output["rewards"]).parent,
        # with an SFT stage: each SFT seed's metrics (results/sft/seed{seed}/model.metrics.jsonl) -> "sft seed{seed}"
        {f"sft {Path(m).parent.name}": Path(m) for m in sft_metrics} if sft_metrics else None,
    )
    expected = {Path(p) for value in job.output.values() for p in _paths(value)}
    if set(written.values()) != expected:
        raise SystemExit(f"report_plots: wrote {sorted(written.values())}, the rule declares {sorted(expected)}")


def report_html(job: Job) -> None:
    from olmpipe.evaluate.compare import format_table, read_comparison
    from olmpipe.records.difficulty import read_summary
    from olmpipe.report.page import ReportSettings, write_report

    comparison = read_comparison(job.input["comparison"])
    difficulty = _paths(job.input.get("difficulty"))
    sft_comparison = _paths(job.input.get("sft_comparison"))
    html = job.output["html"]
    write_report(
        html,
        comparison=comparison,
        plots={Path(p).stem: p for p in _paths(job.input["plots"])},
        settings=ReportSettings.from_config({"report": job.params["report"]}),
        config=job.params["config"],
        pages_index=job.input["pages"],
        tests_dir=job.input["tests"],
        baseline_dir=Path(job.input["baseline_generations"]).parent,
        trained_dir=Path(job.input["trained_generations"]).parent,
        # the difficulty filter's counts (no input: the filter was off) and each seed's training metrics
        difficulty=read_summary(difficulty[0]) if difficulty else None,
        metrics={Path(m).parent.name: m for m in _paths(job.input["metrics"])},
        # with an SFT stage: base vs the SFT model (the base -> SFT -> GRPO section)
        sft_comparison=read_comparison(sft_comparison[0]) if sft_comparison else None,
    )
    # The last job of the `train` target: its table is what the user reads when the run ends (with an
    # SFT stage, base -> SFT first, then SFT -> GRPO).
    table = format_table(comparison)
    if sft_comparison:
        table = format_table(read_comparison(sft_comparison[0])) + "\n\n" + table
    job.logger.info("\n%s", table)
    sys.stdout.write(f"\n{table}\nreport: {html}\n")


#: rule -> its job. Rules made with ``use rule ... as`` run their parent's job (evaluate_sft_compare,
#: sft_soup), named by ``--job``.
JOBS: dict[str, Callable[[Job], None]] = {
    "rasterize": rasterize,
    "validate": validate,
    "validate_audit": validate_audit,
    "build_model": build_model,
    "download_model": download_model,
    "sft_pairs": sft_pairs,
    "soup": soup,
    "difficulty_filter": difficulty_filter,
    "evaluate_compare": evaluate_compare,
    "report_plots": report_plots,
    "report_html": report_html,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m olmpipe.rulejobs", description=__doc__.split("\n\n")[0])
    parser.add_argument("job", choices=sorted(JOBS), help="the job to run")
    parser.add_argument("--rule", help="the rule's name in the log and errors (default: the folder of the log, "
                        "logs/<rule>/)")
    parser.add_argument("--log", required=True, help="the rule's log file")
    parser.add_argument("--files", required=True, help='JSON: {"input": {...}, "output": {...}, "threads": n}')
    parser.add_argument("--param", nargs=2, action="append", default=[], metavar=("NAME", "JSON"),
                        help="a param of the rule, as JSON")
    parser.add_argument("--text", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="a plain string param of the rule")
    args = parser.parse_args(argv)
    rule = args.rule or Path(args.log).parent.name or args.job
    # a rerun's log holds this run only
    Path(args.log).parent.mkdir(parents=True, exist_ok=True)
    Path(args.log).write_text("")
    with rule_job(args.log, rule) as logger:
        files = json.loads(args.files)
        params = {name: json.loads(value) for name, value in args.param}
        params.update(dict(args.text))
        threads = int(files.get("threads", 1))
        # as Snakemake's script jobs did: BLAS/OpenMP use the job's threads (imports come later)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        job = Job(rule=rule, input=files.get("input", {}), output=files.get("output", {}), params=params,
                  log=args.log, threads=threads, logger=logger)
        JOBS[args.job](job)
    return 0


if __name__ == "__main__":
    sys.exit(main())

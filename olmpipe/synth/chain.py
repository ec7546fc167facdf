"""The synthetic bench stages in the workflow: the settings each rule carries and how a rule runs one.

With ``synth.enabled`` the workflow trains on the bench ``synth_tests`` writes
(``results/synth/bench``) and evaluates on the real one; :func:`olmpipe.layout.bench_section`
makes that switch, for the workflow and the ``olmpipe`` commands alike. The folders are
:class:`olmpipe.layout.SynthLayout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def stage_params(synth: Mapping[str, Any]) -> dict[str, Any]:
    """The ``synth`` settings a stage's ``params`` carry: all but ``enabled`` (switching training
    onto the synthetic bench must not rebuild it)."""
    return {k: v for k, v in synth.items() if k != "enabled"}


def source_files(synth: Mapping[str, Any]) -> list[str]:
    """The files ``synth_html`` reads (its Snakemake inputs): the HTML pages of ``html_dir`` or the
    PDFs of ``pdf_dir``; empty when the folder is missing (the stage then says so) and for the
    generated ``words`` pages (their settings are the rule's params)."""
    from pathlib import Path

    if synth["source"] == "words":
        return []

    folder = synth["html_dir"] if synth["source"] == "html" else synth["pdf_dir"]
    suffixes = (".html", ".htm") if synth["source"] == "html" else (".pdf",)
    if not folder or not Path(folder).is_dir():
        return []
    return sorted(str(p) for p in Path(folder).rglob("*") if p.is_file() and p.suffix.lower() in suffixes)


class SynthStageError(RuntimeError):
    """A synth stage failed under Snakemake; the message names the stage, the reason and the log."""


def run_stage(stage: str, log_path: str, synth: Mapping[str, Any], *, longest_side: int | None = None,
              **paths: str) -> None:
    """Run one synth stage for a Snakemake rule's ``run:`` block, logging to ``log_path``.

    ``longest_side`` (``rasterize.longest_side``, the render stage's) is the raster the model reads
    the pages in: text it cannot read there is not mined (:mod:`olmpipe.synth.legible`).

    A failure raises :class:`SynthStageError` (an ``Exception``) with the reason, never
    ``SystemExit``. Snakemake runs a ``run:`` job in a nested ``snakemake --target-jobs ...
    --force-use-threads`` process (snakemake 9.27 ``executors/local.py:174-186,226-233``;
    ``snakemake_interface_executor_plugins/executors/real.py:103``), where the block runs in a
    thread-pool worker whose done-callback handles ``KeyboardInterrupt``, ``SpawnedJobError`` and
    ``Exception`` only (``executors/local.py:263-280``). Any other ``BaseException`` leaves the
    callback, which Python's ``Future._invoke_callbacks`` does not catch either
    (``concurrent/futures/_base.py:337-342``): the worker thread dies ("Exception in worker"), the
    job is never reported failed, and both Snakemake processes wait for it forever.
    """
    import logging

    from olmpipe.bench.mathbrowser import BrowserError
    from olmpipe.synth.bench import build_bench, render_pages
    from olmpipe.synth.source import collect_html

    # The stage's own loggers only: the root logger belongs to the Snakemake process running the job.
    package = logging.getLogger("olmpipe")
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = package.level
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    log = logging.getLogger("olmpipe.synth")
    try:
        if stage == "html":
            collect_html(synth, paths["out"], journal_path=paths["journal"])
        elif stage == "render":
            if longest_side is None:
                raise ValueError("synth_render needs longest_side (rasterize.longest_side)")
            render_pages(paths["html"], paths["out"], synth, longest_side=longest_side)
        else:
            build_bench(paths["html"], paths["render"], paths["out"], paths["report"], synth)
    except (OSError, ValueError, RuntimeError, BrowserError) as exc:
        log.error("%s", exc)
        raise SynthStageError(f"synth_{stage}: {exc} (log: {log_path})") from None
    except Exception as exc:
        log.exception("synth_%s failed", stage)
        raise SynthStageError(f"synth_{stage}: {type(exc).__name__}: {exc} (log: {log_path})") from exc
    except SystemExit as exc:  # a library calling sys.exit(): report it as a failure of this job
        log.error("synth_%s: exited with %r", stage, exc.code)
        raise SynthStageError(f"synth_{stage}: exited with {exc.code!r} (log: {log_path})") from None
    finally:
        package.removeHandler(handler)
        package.setLevel(level)
        handler.close()

"""Stages ``synth_render`` and ``synth_tests``: HTML pages -> one-page PDFs -> an olmOCR-Bench folder.

``render_pages`` prints every page of a ``synth_html`` folder to ``pdfs/<name>.pdf`` (and, for a
seeded share ``synth.rotate_share`` of them, a copy turned 90, 180 or 270 degrees,
``<name>_rot<angle>.pdf``), writing ``index.jsonl`` with each PDF's status and reason.

``build_bench`` mines each rendered page (:func:`olmpipe.synth.mine.mine_page`), keeps only the
tests that are right by construction and writes an olmOCR-Bench folder that ``bench.dir`` and
``olmpipe bench score`` read as they are. Each page is mined and checked in a worker process
bounded in time and memory (:mod:`olmpipe.synth.pages`); a page over a bound, or whose mining
fails, is skipped with the reason:

- ``pdfs/<name>.pdf``, ``synth.jsonl`` (every kept test), ``reference/<name>_pg1_repeat1.md`` (the
  reference answer: markdown with the olmOCR front matter, a candidate folder scoring 100%);
- a test is kept when it loads (:func:`olmpipe.bench.model.test_from_record`), passes on the
  reference answer (with and without its front matter) and fails on a page that should fail it: an
  empty page, or for ``absent`` tests (which an empty page always passes) the page's text with its
  running heads, feet and page numbers written out;
- ``report.json``: pages (HTML, rendered, in the bench, rotated), skipped pages and why, tests by
  type, dropped tests by reason with each one listed.

Both write to a temporary folder beside the output and move it into place, so nothing
half-written is left behind.

    olmpipe synth render --html results/synth/html --out results/synth/render
    olmpipe synth tests --html results/synth/html --render results/synth/render \\
        --out results/synth/bench --report results/synth/report.json
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from olmpipe.bench.mathbrowser import BrowserError, BrowserNotFoundError
from olmpipe.records.candidates import candidate_name
from olmpipe.records.files import publish_dir, staging_dir, write_json
from olmpipe.records.synth import INDEX_NAME, REFERENCE_DIR
from olmpipe.synth.mine import MineLimits
from olmpipe.synth.pages import TESTS_NAME, PageJob, PageSkipped, PageWorker
from olmpipe.synth.render import HtmlRenderer, RenderRefused, rotate_pdf
from olmpipe.synth.source import read_index

log = logging.getLogger(__name__)



VISIBLE_DIR = "visible"
_HIDDEN_SAMPLE = 12  # hidden words quoted per page in the report


@dataclass
class RenderEntry:
    """One line of the render folder's ``index.jsonl``: a PDF made from the page ``name``, with how
    many of its words the printed page shows (``visible/<name>.html`` holds those only)."""

    name: str
    pdf: str
    rotation: int = 0
    status: str = "ok"
    error: str | None = None
    words: int = 0
    hidden_words: int = 0
    hidden_sample: str = ""  # the first hidden words, for the report
    unreadable: dict[str, int] = field(default_factory=dict)  # hidden words painted but unreadable, by reason


def render_pages(html_dir: str | Path, out_dir: str | Path, synth: Mapping[str, Any], *, longest_side: int,
                 renderer: HtmlRenderer | None = None) -> list[RenderEntry]:
    """Print each ``ok`` page of ``html_dir`` to ``out_dir/pdfs/`` (see the module docstring);
    ``longest_side`` is ``rasterize.longest_side``, the raster the model reads the pages in (text it
    cannot read there is not mined: :mod:`olmpipe.synth.legible`)."""
    html_dir, out_dir = Path(html_dir), Path(out_dir)
    tmp = staging_dir(out_dir)
    (tmp / "pdfs").mkdir()
    (tmp / VISIBLE_DIR).mkdir()
    rng = random.Random(f"{synth['seed']}:rotate")
    entries: list[RenderEntry] = []
    own = renderer is None
    renderer = renderer or HtmlRenderer(timeout_s=synth["render_timeout_s"])
    try:
        for page in read_index(html_dir):
            if page.status != "ok":
                continue
            entry = RenderEntry(page.name, f"{page.name}.pdf")
            try:
                html = (html_dir / f"{page.name}.html").read_text(encoding="utf-8")
                printed = renderer.render_page(html, width_pt=page.width_pt, height_pt=page.height_pt,
                                               longest_side=longest_side)
                (tmp / "pdfs" / entry.pdf).write_bytes(printed.pdf)
                (tmp / VISIBLE_DIR / f"{page.name}.html").write_text(printed.visible_html, encoding="utf-8")
                entry.words, entry.hidden_words = printed.words, len(printed.hidden_words)
                entry.hidden_sample = " ".join(printed.hidden_words[:_HIDDEN_SAMPLE])
                entry.unreadable = printed.unreadable
            except BrowserNotFoundError:
                raise
            except (RenderRefused, BrowserError, OSError) as exc:
                entry.status, entry.error = "skipped", f"{page.source}: {exc}"
                log.warning("skipping %s", entry.error)
                entries.append(entry)
                continue
            entries.append(entry)
            if rng.random() < synth["rotate_share"]:
                angle = rng.choice((90, 180, 270))
                rotated = RenderEntry(page.name, f"{page.name}_rot{angle}.pdf", rotation=angle, words=entry.words,
                                      hidden_words=entry.hidden_words, hidden_sample=entry.hidden_sample,
                                      unreadable=entry.unreadable)
                rotate_pdf(tmp / "pdfs" / entry.pdf, tmp / "pdfs" / rotated.pdf, angle)
                entries.append(rotated)
    finally:
        if own:
            renderer.close()
    (tmp / INDEX_NAME).write_text("".join(json.dumps(asdict(e)) + "\n" for e in entries), encoding="utf-8")
    publish_dir(tmp, out_dir)
    return entries


def _limits(synth: Mapping[str, Any]) -> MineLimits:
    t = synth["tests"]
    return MineLimits(present=t["present"], order=t["order"], table_cells=t["table_cells"], math=t["math"])


def _no_test_reason(entry: RenderEntry) -> str:
    """Why a page gave no test; when its print showed none of its words, say so and how many of them
    were painted but unreadable in the page image (e.g. all "too small" at a small
    ``rasterize.longest_side``)."""
    if not entry.words or entry.hidden_words < entry.words:
        return "no test survived the checks (is there text on the page?)"
    unreadable = ", ".join(f"{n} {reason}" for reason, n in entry.unreadable.items())
    return (f"no test survived the checks: the printed page shows none of its {entry.words} words"
            + (f" ({unreadable} in the page image at rasterize.longest_side; olmpipe.synth.legible)"
               if unreadable else ""))


def _reason_key(reason: str) -> str:
    return reason.split(":", 1)[0]


def build_bench(html_dir: str | Path, render_dir: str | Path, out_dir: str | Path, report_path: str | Path,
                synth: Mapping[str, Any]) -> dict:
    """Mine, check and write the synthetic bench and its report; returns the report."""
    html_dir, render_dir, out_dir, report_path = map(Path, (html_dir, render_dir, out_dir, report_path))
    pages = read_index(html_dir)
    rendered = [RenderEntry(**json.loads(line)) for line in
                (render_dir / INDEX_NAME).read_text(encoding="utf-8").splitlines() if line.strip()]
    tmp = staging_dir(out_dir)
    (tmp / "pdfs").mkdir()
    (tmp / REFERENCE_DIR).mkdir()
    skipped = [{"name": p.name, "stage": "synth_html", "reason": p.error} for p in pages if p.status != "ok"]
    skipped += [{"name": r.pdf, "stage": "synth_render", "reason": r.error} for r in rendered if r.status != "ok"]
    all_kept: list[dict] = []
    all_dropped: list[dict] = []
    in_bench = rotated = 0
    limits = _limits(synth)
    with PageWorker(timeout_s=synth["page_timeout_s"], memory_mb=synth["page_memory_mb"]) as worker:
        for entry in rendered:
            if entry.status != "ok":
                continue
            visible = render_dir / VISIBLE_DIR / f"{entry.name}.html"
            if not visible.is_file():
                raise FileNotFoundError(f"{visible} is missing: {render_dir} was written by an older "
                                        f"olmpipe; run synth_render again")
            html = visible.read_text(encoding="utf-8")
            job = PageJob(html, entry.pdf, entry.rotation, synth["seed"], limits, synth["test_timeout_s"])
            try:
                result = worker.run(job)
            except PageSkipped as exc:
                skipped.append({"name": entry.pdf, "stage": "synth_tests", "reason": str(exc)})
                log.warning("skipping %s: %s", entry.pdf, exc)
                continue
            all_dropped += [{**d, "pdf": entry.pdf} for d in result.dropped]
            if not any(t["type"] != "baseline" for t in result.kept):
                skipped.append({"name": entry.pdf, "stage": "synth_tests", "reason": _no_test_reason(entry)})
                continue
            shutil.copyfile(render_dir / "pdfs" / entry.pdf, tmp / "pdfs" / entry.pdf)
            (tmp / REFERENCE_DIR / candidate_name(entry.pdf, 1, 1)).write_text(result.reference + "\n",
                                                                               encoding="utf-8")
            all_kept += result.kept
            in_bench += 1
            rotated += bool(entry.rotation)
    (tmp / TESTS_NAME).write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in all_kept),
                                  encoding="utf-8")
    report = {
        "seed": synth["seed"],
        "pages": {"html": sum(p.status == "ok" for p in pages),
                  "rendered": sum(r.status == "ok" and not r.rotation for r in rendered),
                  "in_bench": in_bench, "rotated": rotated},
        "tests": len(all_kept),
        "tests_by_type": dict(sorted(Counter(t["type"] for t in all_kept).items())),
        "dropped": {"count": len(all_dropped),
                    "by_reason": dict(sorted(Counter(_reason_key(d["reason"]) for d in all_dropped).items())),
                    "tests": all_dropped},
        "skipped": skipped,
        # words in the HTML that the printed page does not show (olmpipe.synth.visible): never mined
        # (of them "unreadable": painted but not readable in the page image, by reason; olmpipe.synth.legible)
        "hidden_text": [{"pdf": r.pdf, "words": r.words, "hidden_words": r.hidden_words, "sample": r.hidden_sample,
                         **({"unreadable": r.unreadable} if r.unreadable else {})}
                        for r in rendered if r.status == "ok" and r.hidden_words and not r.rotation],
    }
    if not all_kept:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError(f"no page of {html_dir} gave a test; skipped pages: "
                         + "; ".join(f"{s['name']}: {s['reason']}" for s in skipped[:5]))
    publish_dir(tmp, out_dir)
    write_json(report_path, report)
    log.info("synthetic bench %s: %d page(s), %d test(s) %s, %d dropped, %d page(s) skipped", out_dir,
             in_bench, len(all_kept), report["tests_by_type"], len(all_dropped), len(skipped))
    return report

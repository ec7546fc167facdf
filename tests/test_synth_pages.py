"""olmpipe.synth.pages: each page is mined and checked in a worker process bounded in time and memory;
a page over a bound, or whose mining fails, is skipped with the reason and the next page still mined.
Hostile pages that took hours, gigabytes or Python's recursion limit on 1d966ff are mined within
the bounds (no browser needed: the pages have no math)."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmpipe.synth.mine import MineLimits
from olmpipe.synth.pages import PageJob, PageSkipped, PageWorker

SMALL = "<html><body><p>A small page with one sentence of text in it.</p></body></html>"


def job(html: str, pdf: str = "page.pdf") -> PageJob:
    return PageJob(html, pdf, rotation=0, seed=0, limits=MineLimits(), test_timeout_s=60)


def vm_size_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmSize:")).split()[1]) / 1024


def test_a_page_over_the_memory_limit_is_skipped_and_the_next_page_is_mined():
    with PageWorker(timeout_s=300, memory_mb=0) as probe:  # the worker's own size on this machine
        probe.run(job(SMALL))
        idle_mb = vm_size_mb(probe._process.pid)
    limit = idle_mb + 64
    with PageWorker(timeout_s=300, memory_mb=limit) as worker:
        assert [t["type"] for t in worker.run(job(SMALL)).kept] == ["present", "baseline"]
        with pytest.raises(PageSkipped, match=r"needed more than .* MB \(synth.page_memory_mb\)"):
            worker.run(job("<br>" * 200_000, "big.pdf"))  # ~200k elements: far more than 64 MB of tree
        assert worker.run(job(SMALL)).kept  # a fresh worker


def test_a_page_over_the_time_limit_is_skipped_and_the_next_page_is_mined():
    with PageWorker(timeout_s=0.05, memory_mb=0) as worker:
        # 1.8 MB of markup: parsing alone takes seconds, 0.05 s is far too little on any machine
        with pytest.raises(PageSkipped, match=r"took more than 0.05 s \(synth.page_timeout_s\)"):
            worker.run(job("<p>" + "<b>word</b> " * 150_000 + "</p>", "slow.pdf"))
        worker.timeout_s = 300
        assert worker.run(job(SMALL)).kept


def test_an_error_while_mining_skips_the_page_with_the_error():
    with PageWorker(timeout_s=300, memory_mb=0) as worker:
        with pytest.raises(PageSkipped, match="TypeError"):
            worker.run(job(None))  # type: ignore[arg-type]
        assert worker.run(job(SMALL)).kept  # the same worker goes on


@pytest.mark.parametrize("page", ["unclosed_math", "spanning_cells", "deep_nesting"])
def test_hostile_pages_are_mined_within_the_bounds(page):
    """On 1d966ff: 300,000 unclosed ``\\(`` took hours (the math regex retried every later one);
    20,000 cells spanning 50 x 50 took more than 300 s and 2 GB (the table grid); 5,000 nested
    ``<div>`` raised RecursionError (the block walk recursed)."""
    html = {
        "unclosed_math": "<p>" + "\\(" * 300_000 + "</p><p>A sentence that is long enough to be a test.</p>",
        "spanning_cells": "<table><tr>" + "<td rowspan=50 colspan=50>ab</td>" * 20_000 + "</tr>"
                          "<tr><td>x</td></tr></table><p>A sentence that is long enough to be a test.</p>",
        "deep_nesting": "<div>" * 5_000 + "<p>A sentence that is long enough to be a test.</p>" + "</div>" * 5_000,
    }[page]
    with PageWorker(timeout_s=120, memory_mb=1024) as worker:
        result = worker.run(job(html, f"{page}.pdf"))
    present = [t["text"] for t in result.kept if t["type"] == "present"]
    assert present == ["A sentence that is long enough to be a test."]

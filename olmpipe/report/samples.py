"""The report's sample of pages: the largest gains and losses, each page image next to both runs'
first answers with every test's verdict (:func:`page_samples`), and the embedding of PNGs into the
self-contained page (:func:`embed_png`).
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from olmpipe.evaluate.compare import ComparisonError
from olmpipe.records.generations import GENERATIONS_NAME, read_generations
from olmpipe.records.pages import read_page_index
from olmpipe.report.sections import pct

__all__ = ["embed_png", "page_samples", "select_pages", "text_block"]


def select_pages(pages: Sequence[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """Up to ``n`` pages: half the largest gains, half the largest losses, then the rest by |change|."""

    def name(p: Mapping[str, Any]) -> tuple[str, int]:
        return (p["pdf"], p["page"])

    gains = sorted((p for p in pages if p["change"] > 0), key=lambda p: (-p["change"], name(p)))
    losses = sorted((p for p in pages if p["change"] < 0), key=lambda p: (p["change"], name(p)))
    chosen = gains[: math.ceil(n / 2)] + losses[: n // 2]
    rest = sorted((p for p in pages if p not in chosen), key=lambda p: (-abs(p["change"]), name(p)))
    return chosen + rest[: max(0, n - len(chosen))]


def embed_png(path: str | Path, width: int | None = None) -> str:
    """A ``data:`` URI of the PNG at ``path``, downscaled to ``width`` pixels when wider."""
    data = Path(path).read_bytes()
    if width is not None:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            if img.width > width:
                img = img.resize((width, max(1, round(img.height * width / img.width))))
                buf = io.BytesIO()
                img.save(buf, format="PNG", optimize=True)
                data = buf.getvalue()
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _first_texts(run_dir: str | Path | None) -> dict[tuple[str, int], tuple[str, int]]:
    """(pdf, page) -> (text of the lowest repeat, number of repeats) of a run's generations."""
    if run_dir is None or not (Path(run_dir) / GENERATIONS_NAME).is_file():
        return {}
    out: dict[tuple[str, int], tuple[int, str, int]] = {}
    for g in read_generations(Path(run_dir) / GENERATIONS_NAME, error=ComparisonError):
        key, g_repeat, g_text = (str(g["pdf"]), int(g["page"])), int(g["repeat"]), str(g["text"] or "")
        repeat, text, n = out.get(key, (g_repeat, g_text, 0))
        out[key] = (repeat, text, n + 1) if repeat <= g_repeat else (g_repeat, g_text, n + 1)
    return {k: (text, n) for k, (_, text, n) in out.items()}


def _page_images(pages_index: str | Path | None) -> dict[tuple[str, int], str]:
    if pages_index is None or not Path(pages_index).is_file():
        return {}
    records = read_page_index(pages_index, required=("pdf", "page", "image"), error=ComparisonError)
    return {(str(rec["pdf"]), int(rec["page"])): str(rec["image"]) for rec in records}


def text_block(text: str | None, repeats: int, max_chars: int) -> str:
    if text is None:
        return "<p class='muted'>no generation found</p>"
    shown = text if len(text) <= max_chars else text[:max_chars]
    note = f" (first {max_chars} of {len(text)} characters)" if len(text) > max_chars else ""
    empty = "<p class='warn'>empty output</p>" if not text.strip() else ""
    return f"<p class='muted'>repeat shown: first of {repeats}{note}</p>{empty}<pre>{escape(shown)}</pre>"


def _verdict(passes: int, repeats: int, passed: bool) -> str:
    return (
        f"<span class='{'ok' if passed else 'bad'}'>{'pass' if passed else 'fail'} {passes}/{repeats}</span>"
    )


def page_samples(comparison, settings, pages_index, baseline_dir, trained_dir, descriptions) -> str:
    chosen = select_pages(comparison["pages"], settings.sample_pages)
    if not chosen:
        return "<p class='muted'>no pages sampled</p>"
    images = _page_images(pages_index)
    base_texts, trained_texts = _first_texts(baseline_dir), _first_texts(trained_dir)
    blocks = []
    for p in chosen:
        key = (p["pdf"], p["page"])
        image = images.get(key)
        if image and Path(image).is_file():
            img_html = f"<img src='{embed_png(image, settings.image_width)}' alt='page image'>"
        else:
            img_html = f"<p class='muted'>page image not found{': ' + escape(image) if image else ''}</p>"
        flags = []
        if p["became_empty_repeats"]:
            flags.append(f"output became empty (repeats {p['became_empty_repeats']})")
        if p["lost_front_matter_repeats"]:
            flags.append(f"front matter lost (repeats {p['lost_front_matter_repeats']})")
        if p["length_outside_limit"]:
            flags.append(f"length ratio {p['length_ratio']:.2f}")
        rows = []
        for t in (t for t in comparison["tests"] if (t["pdf"], t["page"]) == key):
            reason = (f"trained: {t['trained_reason']}" if t["trained_reason"] and not t["trained_passed"]
                      else f"baseline: {t['baseline_reason']}" if t["baseline_reason"]
                      else f"trained: {t['trained_reason']}" if t["trained_reason"] else "")  # fmt: skip
            rows.append(
                f"<tr><td>{escape(t['test_id'])}</td><td>{escape(t['type'])}</td>"
                f"<td>{escape(descriptions.get(t['test_id'], ''))}</td>"
                f"<td>{_verdict(t['baseline_passes'], t['baseline_repeats'], t['baseline_passed'])}</td>"
                f"<td>{_verdict(t['trained_passes'], t['trained_repeats'], t['trained_passed'])}</td>"
                f"<td><small>{escape(reason[:200])}</small></td></tr>"
            )
        b_text, b_n = base_texts.get(key, (None, 0))
        t_text, t_n = trained_texts.get(key, (None, 0))
        blocks.append(
            f"<section class='page'><h3>{escape(p['pdf'])} page {p['page']}: "
            f"{p['baseline_passed']}/{p['tests']} &rarr; {p['trained_passed']}/{p['tests']} tests passed "
            f"({pct(p['change'], True)} points)</h3>"
            + (f"<p class='warn'>{escape('; '.join(flags))}</p>" if flags else "")
            + "<div class='cols'>"
            f"<div><h4>page</h4>{img_html}</div>"
            f"<div><h4>baseline: {escape(comparison['baseline']['name'])}</h4>"
            f"{text_block(b_text, b_n, settings.max_chars)}</div>"
            f"<div><h4>trained: {escape(comparison['trained']['name'])}</h4>"
            f"{text_block(t_text, t_n, settings.max_chars)}</div>"
            "</div><table class='tests'><tr><th>test</th><th>type</th><th>checks</th><th>baseline</th>"
            "<th>trained</th><th>reason (first failing repeat of the run named)</th></tr>"
            f"{''.join(rows)}</table></section>"
        )
    return "".join(blocks)

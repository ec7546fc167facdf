"""The SFT stage's training pairs: (page image, reference answer) in GRPO's answer format.

    olmpipe sft pairs --config config/learn.yaml            # results/sft/pairs.jsonl + pairs.json

Two sources (``sft.source``):

- ``bench``: each page of the train split of the page index (``results/validate/pages.jsonl``;
  with ``synth.enabled`` the synthetic bench's pages) with its answer from the candidate folder
  ``sft.candidate`` of its bench, in olmOCR-Bench's layout (``<candidate>/<pdf without .pdf>_pg<N>_repeat1.md``;
  the synthetic bench's ``reference/`` answers are made from the page's HTML, as olmOCR 2 made its
  SFT targets). Eval pages are never read, so no pair leaks into the evaluation.
- ``pairs``: ``sft.pairs_dir``, a folder of ``<name>.png`` (or ``.jpg``/``.jpeg``) images, each
  beside its answer ``<name>.md`` (or ``.txt``).

An answer with a valid olmOCR front matter (:func:`olmpipe.prompts.parse_page_output`) is kept as
written; one without a front matter (olmOCR-Bench candidates hold the page text only) gets
``sft.front_matter`` above it; one whose front matter block does not parse is skipped and counted,
so that every target is what GRPO's front-matter reward accepts.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.prompts import FrontMatter, format_page_output, parse_page_output
from olmpipe.records.candidates import candidate_name
from olmpipe.records.files import file_sha256
from olmpipe.records.pages import read_page_index
from olmpipe.records.sft import SFTPair, write_pairs, write_pairs_summary

logger = logging.getLogger(__name__)

__all__ = ["PairsError", "bench_pairs", "build_pairs", "folder_pairs", "in_answer_format"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
TEXT_SUFFIXES = (".md", ".txt")


class PairsError(ValueError):
    """Pairs that cannot be built; the message names the file and the reason."""


def in_answer_format(text: str, front_matter: Mapping[str, Any]) -> tuple[str | None, str]:
    """(the answer in GRPO's format, how: ``kept`` / ``front_matter_added``), or (None, the reason)."""
    parsed = parse_page_output(text)
    if parsed.valid:
        return text, "kept"
    if text.lstrip().startswith("---"):
        return None, f"its front matter does not parse ({parsed.error})"
    return format_page_output(FrontMatter(**dict(front_matter)), text), "front_matter_added"


def bench_pairs(index_path: str | Path, candidate: str, front_matter: Mapping[str, Any],
                max_pages: int | None = None) -> tuple[list[SFTPair], dict[str, Any]]:
    """The train split's pages with their answers in ``candidate`` (see the module docstring)."""
    counts: Counter[str] = Counter()
    pairs: list[SFTPair] = []
    for record in read_page_index(index_path, error=PairsError, split="train"):
        pdf, page = str(record["pdf"]), int(record["page"])
        answer = Path(str(record.get("bench_dir", ""))) / candidate / candidate_name(pdf, page, 1)
        if not answer.is_file():
            counts["skipped_no_answer"] += 1
            continue
        target, how = in_answer_format(answer.read_text(encoding="utf-8", errors="replace"), front_matter)
        if target is None:
            logger.warning("%s: skipped: %s", answer, how)
            counts["skipped_bad_front_matter"] += 1
            continue
        image = Path(str(record["image"]))
        if not image.is_file():
            raise PairsError(f"{index_path}:{record['_line']}: page image {image} does not exist; rerun the "
                             "rasterize stage")
        counts[how] += 1
        pairs.append(SFTPair(f"{pdf}#{page}", str(image), file_sha256(image), target, f"bench:{candidate}", pdf, page))
    return _cut(pairs, counts, max_pages)


def folder_pairs(folder: str | Path, front_matter: Mapping[str, Any],
                 max_pages: int | None = None) -> tuple[list[SFTPair], dict[str, Any]]:
    """The image + answer pairs of ``folder`` (recursively, in file name order)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PairsError(f"sft.pairs_dir: {folder} is not a folder")
    images = {p.with_suffix(""): p for p in sorted(folder.rglob("*")) if p.suffix.lower() in IMAGE_SUFFIXES}
    texts = {p.with_suffix(""): p for p in sorted(folder.rglob("*")) if p.suffix.lower() in TEXT_SUFFIXES}
    for stem in sorted(set(images) ^ set(texts)):
        have = images.get(stem) or texts.get(stem)
        lacks = "an answer (.md or .txt)" if stem in images else "an image (.png, .jpg or .jpeg)"
        raise PairsError(f"{have}: no {lacks} of the same name beside it in sft.pairs_dir {folder}")
    counts: Counter[str] = Counter()
    pairs: list[SFTPair] = []
    for stem in sorted(images):
        target, how = in_answer_format(texts[stem].read_text(encoding="utf-8", errors="replace"), front_matter)
        if target is None:
            raise PairsError(f"{texts[stem]}: {how}")
        counts[how] += 1
        name = stem.relative_to(folder).as_posix()
        pairs.append(SFTPair(name, str(images[stem]), file_sha256(images[stem]), target, f"pairs:{folder}"))
    if not pairs:
        raise PairsError(f"sft.pairs_dir: {folder} holds no image + answer pairs")
    return _cut(pairs, counts, max_pages)


def _cut(pairs: list[SFTPair], counts: Counter[str], max_pages: int | None) -> tuple[list[SFTPair], dict[str, Any]]:
    if max_pages is not None and len(pairs) > max_pages:
        counts["truncated"] = len(pairs) - max_pages
        pairs = pairs[:max_pages]
    summary = {"pairs": len(pairs), "kept": counts["kept"], "front_matter_added": counts["front_matter_added"],
               "skipped_no_answer": counts["skipped_no_answer"],
               "skipped_bad_front_matter": counts["skipped_bad_front_matter"], "truncated": counts["truncated"],
               "target_chars": sum(len(p.target) for p in pairs)}
    return pairs, summary


def build_pairs(cfg: Mapping[str, Any], index_path: str | Path, out: str | Path, summary_out: str | Path) -> dict[str, Any]:
    """Write the pairs of ``cfg["sft"]`` to ``out`` and their summary to ``summary_out``; returns the summary.

    Raises :class:`PairsError` when no pair is left (nothing to fine-tune on), naming the source.
    """
    sft = cfg["sft"]
    if sft["source"] == "pairs":
        if not sft["pairs_dir"]:
            raise PairsError("sft.source is `pairs`: set sft.pairs_dir to a folder of page images, each beside "
                             "its answer of the same name (.md or .txt)")
        pairs, summary = folder_pairs(sft["pairs_dir"], sft["front_matter"], sft["max_pages"])
    else:
        pairs, summary = bench_pairs(index_path, sft["candidate"], sft["front_matter"], sft["max_pages"])
        if not pairs:
            raise PairsError(f"{index_path}: no train page has an answer in the candidate folder "
                             f"{sft['candidate']!r} of its bench ({summary['skipped_no_answer']} without one, "
                             f"{summary['skipped_bad_front_matter']} with a front matter that does not parse); "
                             "set sft.candidate, or sft.source: pairs with sft.pairs_dir")
    summary = {"source": sft["source"], **summary}
    write_pairs(out, pairs)
    write_pairs_summary(summary_out, summary)
    logger.info("SFT pairs: %d (%s)", len(pairs), ", ".join(f"{k} {v}" for k, v in summary.items() if k != "source"))
    return summary


def main(argv: list[str] | None = None) -> int:
    """``olmpipe sft pairs``: write the SFT pairs; exit 1 with one line when they cannot be built."""
    from olmpipe.config import ConfigError, load_config
    from olmpipe.layout import PAGE_INDEX, SFT_PAIRS, SFT_PAIRS_SUMMARY

    parser = argparse.ArgumentParser(prog="olmpipe sft pairs", description="Write the SFT stage's training pairs.")
    parser.add_argument("--config", default=None, help="YAML config file (default: config/config.yaml)")
    parser.add_argument("--pages", default=str(PAGE_INDEX), help=f"page index (default {PAGE_INDEX})")
    parser.add_argument("--out", default=str(SFT_PAIRS), help=f"pairs file (default {SFT_PAIRS})")
    parser.add_argument("--summary", default=str(SFT_PAIRS_SUMMARY), help=f"summary (default {SFT_PAIRS_SUMMARY})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        build_pairs(load_config(args.config), args.pages, args.out, args.summary)
    except (ConfigError, PairsError) as exc:
        sys.stderr.write(f"olmpipe sft pairs: {exc}\n")
        return 1
    return 0

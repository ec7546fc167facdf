"""The GRPO training set: one example per (pdf, page) of the train split of the validated page index.

Each example holds the chat prompt (:func:`olmpipe.prompts.build_messages`, the same builder the
generation backends use, with an image placeholder TRL fills), the rasterized page image (a path
in a ``datasets.Image`` column, decoded from disk when the example is read: pages are never
rendered again), the page's test ids and the JSONL file of each (``test_files``, what
:class:`olmpipe.rewards.BenchReward` reads), and optionally a reference answer.

Pages without tests, or whose tests are all removed by the reward filters (``rewards.bench.types``
and ``rewards.bench.jsonl_regex``), are skipped and counted in :class:`DatasetSummary`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from olmpipe.layout import DIFFICULTY_DROPPED
from olmpipe.records.candidates import candidate_name
from olmpipe.records.pages import PAGE_FIELDS, read_page_index

logger = logging.getLogger(__name__)



class PageIndexError(ValueError):
    """A page index line that cannot be used; the message names the file, the line and the reason."""


@dataclass(frozen=True)
class PageExample:
    """One training example before it becomes a ``datasets`` row."""

    pdf: str
    page: int
    image: str
    test_ids: list[str]
    test_files: list[str]
    test_types: list[str]
    reference: str | None = None


@dataclass
class DatasetSummary:
    """What went into the training set and what was left out, written next to the run's metrics."""

    split: str
    pages: int = 0
    tests: int = 0
    skipped_other_split: int = 0
    skipped_no_tests: int = 0
    skipped_filtered: int = 0
    truncated: int = 0
    with_reference: int = 0
    tests_by_type: dict[str, int] = field(default_factory=dict)
    tests_by_jsonl: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reference_text(bench_dir: str | None, candidate: str | None, pdf: str, page: int) -> str | None:
    """The reference answer of a page from a candidate folder (olmOCR-Bench layout), if there is one."""
    if not candidate or not bench_dir:
        return None
    path = Path(bench_dir) / candidate / candidate_name(pdf, page, 1)
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def build_examples(
    index_path: str | Path,
    tests_dir: str | Path,
    *,
    split: str = "train",
    types: list[str] | tuple[str, ...] = (),
    jsonl_regex: str | None = None,
    reference_candidate: str | None = None,
    max_pages: int | None = None,
    check_tests: bool = True,
) -> tuple[list[PageExample], DatasetSummary]:
    """The examples of ``split`` from the page index, with the reward filters applied.

    ``check_tests`` loads every test file once and fails early (naming the index line) when an id
    is missing, instead of in the middle of a training step.
    """
    index_path, tests_dir = Path(index_path), Path(tests_dir)
    pattern = re.compile(jsonl_regex, re.IGNORECASE) if jsonl_regex else None
    type_set = set(types)
    summary = DatasetSummary(split=split)
    by_type: Counter[str] = Counter()
    by_jsonl: Counter[str] = Counter()
    examples: list[PageExample] = []
    known_ids: dict[str, set[str]] = {}
    for record in read_page_index(index_path, required=PAGE_FIELDS, error=PageIndexError):
        where = f"{index_path}:{record['_line']}"
        if record["split"] != split:
            summary.skipped_other_split += 1
            continue
        ids, files, kinds = [], [], []
        for test_id in record["test_ids"]:
            jsonl = record["jsonl_files"].get(test_id)
            kind = record["types"].get(test_id)
            if jsonl is None or kind is None:
                raise PageIndexError(f"{where}: test {test_id!r} has no entry in jsonl_files/types")
            if pattern is not None and not pattern.search(jsonl):
                continue
            if type_set and kind not in type_set:
                continue
            ids.append(test_id)
            files.append(str(tests_dir / jsonl))
            kinds.append(kind)
        if not ids:
            if record["test_ids"]:
                summary.skipped_filtered += 1
            else:
                summary.skipped_no_tests += 1
            continue
        if check_tests:
            _check_ids(where, ids, files, known_ids)
        image = Path(record["image"])
        if not image.is_file():
            raise PageIndexError(f"{where}: page image {image} does not exist; rerun the rasterize stage")
        reference = _reference_text(record.get("bench_dir"), reference_candidate, record["pdf"], int(record["page"]))
        examples.append(PageExample(record["pdf"], int(record["page"]), str(image), ids, files, kinds, reference))
        by_type.update(kinds)
        by_jsonl.update(Path(f).name for f in files)
    if max_pages is not None and len(examples) > max_pages:
        summary.truncated = len(examples) - max_pages
        examples = examples[:max_pages]
        by_type, by_jsonl = Counter(), Counter()
        for ex in examples:
            by_type.update(ex.test_types)
            by_jsonl.update(Path(f).name for f in ex.test_files)
    summary.pages = len(examples)
    summary.tests = sum(len(ex.test_ids) for ex in examples)
    summary.with_reference = sum(ex.reference is not None for ex in examples)
    summary.tests_by_type = dict(sorted(by_type.items()))
    summary.tests_by_jsonl = dict(sorted(by_jsonl.items()))
    logger.info(
        "%s split: %d pages, %d tests; skipped %d pages without tests, %d with all tests filtered out",
        split, summary.pages, summary.tests, summary.skipped_no_tests, summary.skipped_filtered,
    )
    return examples, summary


def training_set_id(examples: Sequence[PageExample]) -> dict[str, Any]:
    """What identifies a training set in a run's settings (``training_set.*``, :mod:`olmpipe.job.resume`):
    its page count and the SHA-256 of its pages in order, each with its test ids.

    The order counts: TRL's sampler draws dataset indices, so a checkpoint's sampler position means
    the same pages only on the same list. The hash covers what :func:`build_examples` kept, i.e.
    after the page index (the difficulty filter's, when on), the split, ``train.max_pages`` and the
    reward filters; not the images' pixels nor the tests' text (a test edited under its id).

    >>> training_set_id([PageExample("a.pdf", 1, "p.png", ["t1"], ["x.jsonl"], ["present"])])["pages"]
    1
    """
    rows = [[ex.pdf, ex.page, list(ex.test_ids)] for ex in examples]
    text = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    return {"pages": len(rows), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def check_generation_batch(pages: int, generation_batch_size: int, num_generations: int) -> None:
    """Raise ``ValueError`` when the training set has fewer pages than one generation batch asks for.

    TRL's ``RepeatSampler`` draws ``generation_batch_size // num_generations`` pages per generation
    batch and drops an incomplete last chunk (trl 1.16 trl/trainer/utils.py:939-943), so a smaller
    training set yields no batch at all: training ends at step 0 with only a log line of
    transformers', and the "trained" model is the base model. A small bench, ``train.max_pages`` or
    the difficulty filter (``train.difficulty``) can get there.
    """
    needed = generation_batch_size // num_generations
    if pages < needed:
        raise ValueError(
            f"the training set has {pages} page(s) but one generation batch takes {needed} "
            f"(per_device_train_batch_size x processes x steps_per_generation = {generation_batch_size} "
            f"completions / num_generations {num_generations}): training would stop at step 0. Add train "
            "pages, lower train.grpo.per_device_train_batch_size or steps_per_generation, or loosen "
            f"train.difficulty (see {DIFFICULTY_DROPPED})"
        )


def _check_ids(where: str, ids: list[str], files: list[str], known: dict[str, set[str]]) -> None:
    from olmpipe.bench import load_tests

    for test_id, path in zip(ids, files, strict=True):
        if path not in known:
            if not Path(path).is_file():
                raise PageIndexError(f"{where}: test file {path} does not exist; rerun the validate stage")
            known[path] = {t.id for t in load_tests(path)}
        if test_id not in known[path]:
            raise PageIndexError(f"{where}: test {test_id!r} is not in {path}")


def reward_columns(example: PageExample) -> dict[str, Any]:
    """The dataset columns of ``example`` that TRL hands the reward functions with each completion.

    Every column but ``prompt`` and ``images`` (TRL passes the images too; no reward reads them), in
    the dataset's order: ``pdf``, ``page``, ``test_ids``, ``test_files``, ``test_types``,
    ``reference``. The difficulty stage (:mod:`olmpipe.difficulty`) scores its samples with exactly these.
    """
    return {
        "pdf": example.pdf,
        "page": example.page,
        "test_ids": example.test_ids,
        "test_files": example.test_files,
        "test_types": example.test_types,
        "reference": example.reference,
    }


def to_dataset(examples: list[PageExample]):
    """A ``datasets.Dataset`` with the columns TRL and the rewards read.

    Columns: ``prompt`` (conversation with an image placeholder), ``images`` (list of one image,
    decoded from its file on access), ``pdf``, ``page``, ``test_ids``, ``test_files``,
    ``test_types``, ``reference``.
    """
    from datasets import Dataset, Features, Image, List, Value

    from olmpipe.prompts import build_messages

    if not examples:
        raise ValueError("the training set is empty: no page of the split has tests (see the dataset summary)")
    rows: dict[str, list[Any]] = {
        "prompt": [build_messages() for _ in examples],
        "images": [[ex.image] for ex in examples],
    }
    for ex in examples:
        for name, value in reward_columns(ex).items():
            rows.setdefault(name, []).append(value)
    dataset = Dataset.from_dict(rows)
    features = Features({**dataset.features, "images": List(Image()), "reference": Value("string")})
    return dataset.cast(features)

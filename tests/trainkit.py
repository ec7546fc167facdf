"""Small training fixtures for the train/soup tests: a page index over the bundled sample's tests.

The page index follows the contract of the validate stage (docs/architecture.md) but uses plain
generated images, so the train tests do not depend on rasterizing or validating anything.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "bench" / "olmocr-sample"


def make_page_index(root: Path, *, n_train: int = 4, n_eval: int = 1, extra_empty: bool = True) -> tuple[Path, Path]:
    """Write ``root/pages.jsonl`` and ``root/tests/dataset.jsonl``; returns (pages, tests_dir).

    Pages come from the sample's dataset.jsonl (one per PDF page, sorted); the first ``n_train`` are
    the train split, the next ``n_eval`` the eval split; with ``extra_empty`` one more train page
    has no tests (it must be skipped and counted).
    """
    tests_dir = root / "tests"
    tests_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLE / "dataset.jsonl", tests_dir / "dataset.jsonl")
    by_page: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for line in (SAMPLE / "dataset.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            by_page[(record["pdf"], record["page"])].append(record)
    keys = sorted(by_page)[: n_train + n_eval]
    lines = []
    for i, key in enumerate(keys):
        image = root / "pages" / f"p{i}.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (220, 300), (255, 255 - 30 * i, 250)).save(image)
        tests = by_page[key]
        lines.append({
            "pdf": key[0], "page": key[1], "image": str(image), "split": "train" if i < n_train else "eval",
            "bench_dir": str(SAMPLE), "test_ids": [t["id"] for t in tests],
            "jsonl_files": {t["id"]: "dataset.jsonl" for t in tests}, "types": {t["id"]: t["type"] for t in tests},
        })
    if extra_empty:
        image = root / "pages" / "empty.png"
        Image.new("RGB", (220, 300), "white").save(image)
        lines.append({"pdf": "empty.pdf", "page": 1, "image": str(image), "split": "train",
                      "bench_dir": str(SAMPLE), "test_ids": [], "jsonl_files": {}, "types": {}})
    pages = root / "pages.jsonl"
    pages.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return pages, tests_dir


class LowIdReward:
    """A reward the tiny random model can reach: the share of completion tokens with id < ``limit``.

    The configured rewards hardly vary on the random tiny model (zero advantages, no update), so
    tests that need the weights to move every step (learning, weight-equality after a resume)
    train on this instead.
    """

    __name__ = "low_id_reward"

    def __init__(self, limit: int = 256):
        self.limit = limit

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs):
        return [sum(t < self.limit for t in ids) / max(1, len(ids)) for ids in completion_ids]


def moved_elements(base: Path, trained: Path) -> dict[str, tuple[int, int]]:
    """Per floating tensor of the model folder ``trained``: (elements that differ from the model folder
    ``base`` rounded to its dtype, elements)."""
    from safetensors.torch import load_file

    b, t = load_file(str(base / "model.safetensors")), load_file(str(trained / "model.safetensors"))
    assert set(b) <= set(t), sorted(set(b) - set(t))
    return {k: (int((b[k].to(t[k].dtype) != t[k]).sum()), t[k].numel()) for k in b if t[k].is_floating_point()}


def moved_summary(moved: dict[str, tuple[int, int]], reference: dict[str, tuple[int, int]]) -> dict[str, float]:
    """Tensors and elements moved, as shares of those a float32 reference run moved (a tensor counts
    when at least half of the elements the reference moved in it moved)."""
    trained = [k for k, (n, _) in reference.items() if n]
    tensors = [k for k in trained if moved[k][0] >= 0.5 * reference[k][0]]
    elements = sum(min(moved[k][0], reference[k][0]) for k in trained)
    return {"trained_tensors": len(trained), "moved_tensors": len(tensors),
            "tensor_share": len(tensors) / len(trained),
            "element_share": elements / sum(reference[k][0] for k in trained),
            "all_tensors": len(moved), "any_change_tensors": sum(1 for n, _ in moved.values() if n)}


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes): two final folders compare whole."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def assert_same_final_folder(a: Path, b: Path, info: str = "olmpipe_train.json") -> None:
    """``a`` and ``b`` hold the same files (names; the weights are compared by the caller) and their
    ``info`` JSON files are equal but for ``from_checkpoint`` (which says how the folder was written):
    a final folder written from a checkpoint records what the run that trained it recorded."""
    x, y = folder_files(a), folder_files(b)
    assert sorted(x) == sorted(y), (sorted(set(x) - set(y)), sorted(set(y) - set(x)))
    if info in x:
        ix, iy = (json.loads(v[info]) for v in (x, y))
        ix.pop("from_checkpoint", None), iy.pop("from_checkpoint", None)
        assert ix == iy

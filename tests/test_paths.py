"""Every result path and file name has one owner: ``olmpipe/layout.py`` or ``olmpipe/records/``.

The test reads every string literal of the package (docstrings left out), the workflow's rules and
scripts and the ``Snakefile``, and fails on one that spells a path under ``results/`` or a file
name with a data extension (``x.json``, ``*.jsonl``, ``index.html``, ...) outside those owners.
Import the name instead (``from olmpipe.layout import PAGE_INDEX``, ``from olmpipe.records.scores
import SUMMARY_NAME``; ``docs/architecture.md`` and ``olmpipe/layout.py`` say how to add one).

:data:`ALLOWED` lists the few file names that are no file of the workflow, each with its reason.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: A path under the workflow's results folder.
RESULT_PATH = re.compile(r"(?<![\w.-])results/")
#: A file name (or glob) with the extension of a data file the stages write or read.
FILE_NAME = re.compile(r"[\w.*{}\[\]<>/-]*[\w*}\]>-]\.(?:jsonl|json|csv|md|png|html|txt|lock|pt|safetensors|parquet)\b")
#: Files of the repository itself (documentation, configuration, the workflow's own files), not results.
REPOSITORY_FILES = ("docs/", "config/", "workflow/", "tests/", "scripts/", "data/", "../")

#: File names that are not olmpipe's to own, and why they may be spelled where they are used.
ALLOWED = {
    # The Hugging Face model folder: transformers' and safetensors' own file names, read where
    # olmpipe inspects a model folder (modelload, plan, generate's model identity, soup).
    "config.json": "transformers' model config file (CONFIG_NAME)",
    "tokenizer_config.json": "transformers' tokenizer config file (TOKENIZER_CONFIG_FILE)",
    "preprocessor_config.json": "transformers' image processor config file (IMAGE_PROCESSOR_NAME), read for the image budget",
    "processor_config.json": "transformers' processor config file (PROCESSOR_NAME), read for the image budget",
    "model.safetensors": "transformers' single-file weights (SAFE_WEIGHTS_NAME)",
    "model.safetensors.index.json": "transformers' sharded weights index (SAFE_WEIGHTS_INDEX_NAME)",
    "pytorch_model.bin.index.json": "transformers' sharded .bin weights index (WEIGHTS_INDEX_NAME)",
    "trainer_state.json": "transformers' checkpoint state file (TRAINER_STATE_NAME, transformers/trainer.py)",
    "tokenizer.json": "the tokenizers library's file a Qwen tokenizer loads from (olmpipe.models.folder)",
    "vocab.json": "a BPE tokenizer's vocabulary (transformers' Qwen2Tokenizer VOCAB_FILES_NAMES), olmpipe.models.folder",
    "merges.txt": "a BPE tokenizer's merges (transformers' Qwen2Tokenizer VOCAB_FILES_NAMES), olmpipe.models.folder",
    "chat_template.json": "transformers' legacy processor chat template file (LEGACY_PROCESSOR_CHAT_TEMPLATE_FILE)",
    "adapter_config.json": "PEFT's adapter config file (peft.utils.constants.CONFIG_NAME)",
    "adapter_model.safetensors": "PEFT's adapter weights (peft.utils.constants.SAFETENSORS_WEIGHTS_NAME)",
    "README.md": "the model card PEFT's save_pretrained writes into an adapter folder (olmpipe.job.peft)",
    # Package data, not results.
    "grpo_fields.json": "package data beside olmpipe/config/grpo_fields.py (GRPOConfig's fields)",
    "sft_fields.json": "package data beside olmpipe/config/sft_fields.py (SFTConfig's fields)",
    # The parity reference (../shared/bench/parity-dev): an external data set, read only by olmpipe.bench.parity.
    "results.jsonl": "the parity reference's olmocr verdicts (olmpipe.bench.parity)",
    "variants.jsonl": "the parity reference's completion variants (olmpipe.bench.parity)",
    "baseline_auto.jsonl": "the parity reference's automatic baseline tests (olmpipe.bench.parity)",
    # Text that only mentions a file name.
    "page_startx_starty_width_height.png": "words of olmOCR's prompt (olmpipe.prompts), sent to the model",
    "**/*.md": "the bundled bench's markdown read as tokenizer corpus (olmpipe.models.tiny), a source, not a result",
}


def scanned_files() -> list[Path]:
    """The package (less the owners), the workflow's rules and scripts, and the Snakefile."""
    package = [p for p in sorted((REPO / "olmpipe").rglob("*.py"))
               if p.name != "layout.py" and "records" not in p.relative_to(REPO / "olmpipe").parts]
    workflow = sorted((REPO / "workflow").rglob("*.py")) + sorted((REPO / "workflow").rglob("*.smk"))
    return package + workflow + [REPO / "Snakefile"]


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def string_literals(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal of a Python file (docstrings left out) or of a rule file.

    Rule files (``.smk``, ``Snakefile``) are not Python: their tokens are read instead, comments
    left out.
    """
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        tree = ast.parse(text)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                yield node.lineno, node.value
        return
    string_types = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in string_types:
            yield token.start[0], token.string


def spelled_paths(text: str) -> list[str]:
    """What ``text`` spells that belongs to layout.py or records/: result paths and file names."""
    found = [m.group(0) for m in RESULT_PATH.finditer(text)]
    for name in FILE_NAME.findall(text):
        if name not in ALLOWED and not name.startswith(REPOSITORY_FILES):
            found.append(name)
    return found


def test_no_result_path_or_file_name_is_spelled_outside_layout_and_records() -> None:
    offences = [f"{path.relative_to(REPO)}:{line}: {spelled} (in {text[:80]!r})"
                for path in scanned_files() for line, text in string_literals(path)
                for spelled in spelled_paths(text)]
    assert not offences, (
        "result paths and file names belong to olmpipe/layout.py or olmpipe/records/ (import the name):\n"
        + "\n".join(offences))


def test_every_allowed_name_is_still_spelled_somewhere() -> None:
    """An allow-list entry nobody needs any more is removed, not kept as a hole in the guard."""
    texts = [text for path in scanned_files() for _, text in string_literals(path)]
    unused = [name for name in ALLOWED if not any(name in FILE_NAME.findall(text) for text in texts)]
    assert not unused, f"ALLOWED entries no longer used: {unused}"


@pytest.mark.parametrize(("source", "suffix", "expected"), [
    ('OUT = "results/train/seed0"\n', ".py", ["results/"]),
    ('p = run / "summary.json"\n', ".py", ["summary.json"]),
    ('p = f"{run}/scores.csv"\n', ".py", ["/scores.csv"]),
    ('files = sorted(d.glob("*.jsonl"))\n', ".py", ["*.jsonl"]),
    ('def f():\n    """Writes results/x/summary.json."""\n    return 1\n', ".py", []),
    ('# results/validate/pages.jsonl\nx = 1\n', ".py", []),
    ('log.info("see docs/vllm.md")\n', ".py", []),
    ('m = load("config.json")\n', ".py", []),
    ('tag = "results"\n', ".py", []),
    ('rule a:\n    output:\n        "results/a/b.txt",\n', ".smk", ["results/", "results/a/b.txt"]),
    ('rule a:\n    log:\n        "logs/a/a.log",\n    conda:\n        "../envs/o.yaml"\n', ".smk", []),
    ('# "results/a/b.json"\nrule a:\n    shell:\n        "true"\n', ".smk", []),
])
def test_the_guard_finds_what_it_must(tmp_path: Path, source: str, suffix: str, expected: list[str]) -> None:
    """The scanner itself: result paths and data file names in code and rules, not in docstrings,
    comments, repository file references or allowed names."""
    path = tmp_path / f"module{suffix}"
    path.write_text(source)
    assert [s for _, text in string_literals(path) for s in spelled_paths(text)] == expected

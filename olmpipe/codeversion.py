"""Which package code reruns which Snakemake rule: one table, and the hash a rule passes as a param.

Snakemake reruns a job when its ``params`` change, but it does not notice edits to imported package
code. Each rule therefore passes ``params: code=rule_code_version("<rule>")``, a hash of the source
of the ``olmpipe`` modules listed for it in :data:`RULE_CODE`; editing one of them reruns that rule
and everything downstream, while edits elsewhere (modules no rule lists, tests, docs) rerun nothing.

    rule validate:
        params:
            code=rule_code_version("validate"),

A list names what the rule's job runs, minus code left out on purpose (said next to the entry):
a module that moves or is renamed moves with it, so a finished results folder reruns only the
rules whose listed code really changed.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

#: Rule (or group of rules running the same code) -> the modules whose source its ``params: code``
#: hashes; plus ``generations``, the code a generation journal's fingerprint hashes. A package
#: stands for every ``.py`` file below it. Read-only. The one table of code versions.
RULE_CODE: Mapping[str, tuple[str, ...]] = MappingProxyType({
    # synth_html renders the pages it writes through the rasterizer.
    "synth_html": ("olmpipe.synth.source", "olmpipe.synth.words", "olmpipe.rasterize", "olmpipe.records.synth"),
    "synth_render": ("olmpipe.synth.render", "olmpipe.synth.visible", "olmpipe.synth.pagejs", "olmpipe.synth.legible", "olmpipe.synth.bench",
                     "olmpipe.records.synth"),
    "synth_tests": (
        "olmpipe.synth.mine",
        "olmpipe.synth.pages",
        "olmpipe.synth.bench",
        "olmpipe.synth.render",
        "olmpipe.bench.model",
        "olmpipe.records.synth",
        "olmpipe.records.candidates",
    ),
    # Editing olmpipe/rasterize.py re-renders every page (the page manifests record this hash).
    # Every rule lists the olmpipe.records modules through which it writes its files: they own the
    # formats the next stage reads. The result paths (olmpipe.layout) are in no list: a changed path
    # is a changed output, which Snakemake sees itself; the bench folders read (olmpipe.bench.folders) are.
    "rasterize": ("olmpipe.rasterize", "olmpipe.bench.folders", "olmpipe.records.files", "olmpipe.records.manifest"),
    # The test loader (olmpipe.bench.model/normalize) but not the scorer: scoring edits must not
    # rerun the chain.
    "validate": (
        "olmpipe.validate.stage",
        "olmpipe.validate.outputs",
        "olmpipe.validate.result",
        "olmpipe.validate.split",
        "olmpipe.bench.folders",
        "olmpipe.bench.model",
        "olmpipe.bench.normalize",
        "olmpipe.records.files",
        "olmpipe.records.manifest",
        "olmpipe.records.pages",
    ),
    # The trivial-answer audit scores with the rewards, the unit-test engine and the trainer's dataset
    # columns; editing any of them reruns only the audit (nothing reads its files).
    "validate_audit": (
        "olmpipe.validate.audit",
        "olmpipe.rewards",
        "olmpipe.bench",
        "olmpipe.prompts",
        "olmpipe.job.data",
        "olmpipe.records",
    ),
    # The tiny model's builder and the processor class and chat template it saves (olmpipe.models.load),
    # and the architectures' classes and image budgets (olmpipe.models.architectures).
    "build_model": ("olmpipe.models.tiny", "olmpipe.models.load", "olmpipe.models.architectures", "olmpipe.records.models"),
    # Generation and scoring of the eval pages: baseline_generate and evaluate_generate run the same
    # code, so editing it reruns both (their entry points olmpipe.evaluate.baseline, olmpipe.evaluate.stage are thin).
    "generate": (
        "olmpipe.evaluate.engine",
        "olmpipe.generate",
        "olmpipe.prompts",
        "olmpipe.bench",
        "olmpipe.bench.folders",
        "olmpipe.records",
    ),
    # train_seed: the training job (olmpipe.job), GRPO's steps and trainer (olmpipe.train, not the
    # soup), with its seams into TRL/transformers/vLLM (olmpipe.compat), the rewards and the prompt. The unit-test engine (olmpipe.bench) is left out on purpose, as validate leaves
    # out the scorer: a refactor there must not throw away days of GPU training; after a change of
    # test semantics retrain with `snakemake -R train_seed`.
    "train_seed": (
        "olmpipe.job",
        "olmpipe.train.run",
        "olmpipe.train.trainer",
        "olmpipe.train.args",
        "olmpipe.train.completions",
        "olmpipe.train.vllm_server",
        "olmpipe.train.cli",
        "olmpipe.config.grpo_fields",
        "olmpipe.compat",
        "olmpipe.rewards",
        "olmpipe.prompts",
        "olmpipe.records",
    ),
    # The difficulty stage samples through the generation engine and scores with the trainer's
    # rewards and dataset columns; like train_seed it leaves the unit-test engine out (a scorer
    # refactor must not resample), so after a change of test semantics use -R difficulty_sample.
    "difficulty_sample": (
        "olmpipe.difficulty",
        "olmpipe.generate",
        "olmpipe.prompts",
        "olmpipe.rewards",
        "olmpipe.job.data",
        "olmpipe.models.load",
        "olmpipe.records",
    ),
    "difficulty_filter": ("olmpipe.difficulty.filter", "olmpipe.difficulty.settings", "olmpipe.records"),
    # The SFT stage: its pairs (the answers' front matter through the prompt module), and its jobs
    # (the training job, SFT's steps and trainer, their seams into TRL/transformers).
    "sft_pairs": ("olmpipe.sft.pairs", "olmpipe.prompts", "olmpipe.records.sft", "olmpipe.records.files",
                  "olmpipe.records.pages", "olmpipe.records.candidates"),
    "sft_seed": ("olmpipe.job", "olmpipe.sft", "olmpipe.config.sft_fields", "olmpipe.compat", "olmpipe.prompts",
                 "olmpipe.records"),
    "soup": ("olmpipe.train.soup", "olmpipe.records.files", "olmpipe.records.models"),
    # Not a rule: the code whose edits invalidate the finished generations a generation job (or the
    # difficulty stage) reuses from its journal (olmpipe.evaluate.engine.generation_fingerprint). Decoding
    # and prompt only: a scorer edit reruns `generate` but rescores the journaled pages.
    "generations": ("olmpipe.generate", "olmpipe.prompts"),
    # The comparison (not the trained model's generation: editing the statistics or guards reruns
    # only the comparison and the report).
    "evaluate_compare": ("olmpipe.evaluate.stage", "olmpipe.evaluate.compare", "olmpipe.evaluate.stats", "olmpipe.evaluate.guards", "olmpipe.records"),
    # report_plots and report_html: editing a plot or the page reruns only the report.
    "report": (
        "olmpipe.report.page",
        "olmpipe.report.sections",
        "olmpipe.report.samples",
        "olmpipe.report.template",
        "olmpipe.report.plots",
        "olmpipe.bench.describe",
        "olmpipe.bench.model",
        "olmpipe.records",
    ),
})


def rule_code_version(name: str) -> str:
    """:func:`code_version` of the modules :data:`RULE_CODE` lists for rule (or rule group) ``name``.

    >>> rule_code_version("rasterize") == code_version("olmpipe.rasterize")
    True
    """
    return code_version(*rule_modules(name))


#: Packages that a rule's list may name whole but that stand for the modules of theirs the rule's
#: other modules import (:func:`rule_modules`): the file owners of :mod:`olmpipe.records`, so that
#: editing ``records/synth.py`` or ``records/difficulty.py`` reruns the stages that read or write
#: those files and not baseline generation or training.
BY_IMPORT = ("olmpipe.records",)
#: Modules whose imports :func:`imported_closure` does not follow: the result paths, which import
#: every records module for its file names. A changed path is a changed output, which Snakemake sees
#: itself (the module docstring), so the records modules a rule reaches only through the paths do
#: not rerun it.
NOT_FOLLOWED = ("olmpipe.layout",)


def rule_modules(name: str) -> tuple[str, ...]:
    """The modules whose source makes rule ``name``'s code version: :data:`RULE_CODE`'s list, with
    each package of :data:`BY_IMPORT` replaced by the modules of it that the listed code imports,
    directly or through each other (read from the source with :mod:`ast`, function-level imports
    included; nothing is imported)."""
    try:
        listed = RULE_CODE[name]
    except KeyError:
        raise KeyError(f"rule_code_version: no code list for {name!r}; add it to RULE_CODE "
                       f"(known: {', '.join(sorted(RULE_CODE))})") from None
    direct = [m for m in listed if m not in BY_IMPORT]
    by_import = [p for p in listed if p in BY_IMPORT]
    if not by_import:
        return tuple(listed)
    used = imported_closure(direct)
    # modules only: a package name would stand for every file below it (its __init__ runs, but the
    # file owners' package __init__ holds no code)
    picked = sorted(m for m in used if any(m.startswith(p + ".") for p in by_import) and not _source_of(m)[1])
    return (*direct, *picked)


def _imports_of(path: Path, module: str, is_package: bool) -> frozenset[str]:
    """Dotted ``olmpipe`` modules (or the names imported from them) that the file of ``module`` imports;
    each file is parsed once per version of it (every rule's closure shares the package's modules)."""
    st = path.stat()
    return _parsed_imports(str(path), st.st_mtime_ns, st.st_size, module, is_package)


@functools.lru_cache(maxsize=1024)
def _parsed_imports(path: str, mtime_ns: int, size: int, module: str, is_package: bool) -> frozenset[str]:
    """:func:`_imports_of` for one version of the file (``mtime_ns`` and ``size`` key the cache)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), path)
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "olmpipe")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                src = f"{base}.{node.module}" if node.module else base
            else:
                src = node.module or ""
            if src.split(".")[0] != "olmpipe":
                continue
            out.add(src)
            out.update(f"{src}.{a.name}" for a in node.names)  # `from pkg import module`
    return frozenset(out)


def _source_of(module: str) -> tuple[Path, bool] | None:
    """The source file of an ``olmpipe`` module and whether it is a package's ``__init__``, found from
    the package's folder (``find_spec`` would import the parent packages); None: not a module."""
    root = Path(__file__).resolve().parent
    parts = module.split(".")[1:]
    path = root.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py", True
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py"), False
    return None


def imported_closure(modules: list[str] | tuple[str, ...]) -> set[str]:
    """Every ``olmpipe`` module that ``modules`` (packages: all their files) import, transitively,
    with ``modules``' own; names that are not modules (a function imported from a module) are
    dropped. A module's parent packages count too (importing it runs their ``__init__``)."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        module = todo.pop()
        if module in seen or module.split(".")[0] != "olmpipe" or module in NOT_FOLLOWED:
            continue
        found = _source_of(module)
        if found is None:
            continue
        seen.add(module)
        path, is_package = found
        todo.extend(_imports_of(path, module, is_package))
        parent = module.rpartition(".")[0]
        if parent:
            todo.append(parent)
        if is_package and module in modules:  # a listed package stands for every file below it
            todo.extend(".".join([module, *p.relative_to(path.parent).with_suffix("").parts])
                        for p in path.parent.rglob("*.py") if p.name != "__init__.py")
    return seen


def module_files(module: str) -> tuple[Path, list[Path]]:
    """Base folder and source files of a module (one file) or a package (every ``.py`` below it).

    Found with ``importlib.util.find_spec``, so the module itself is not imported (its parent
    packages are).
    """
    spec = importlib.util.find_spec(module)
    if spec is None:
        raise ModuleNotFoundError(f"code_version: no module named {module!r}")
    if spec.submodule_search_locations:  # a package (regular or namespace): all of it
        bases = [Path(loc) for loc in spec.submodule_search_locations]
        return bases[0], sorted(p for base in bases for p in base.rglob("*.py"))
    if spec.origin is None:
        raise ModuleNotFoundError(f"code_version: module {module!r} has no source file")
    origin = Path(spec.origin)
    return origin.parent, [origin]


def code_version(*modules: str) -> str:
    """Short hash of the source of ``modules`` (dotted names; a package stands for all its files).

    Used as a rule parameter so that editing the code a stage runs reruns that stage:

    >>> len(code_version("olmpipe.rasterize"))
    16
    """
    digest = hashlib.sha256()
    for module in sorted(set(modules)):
        base, files = module_files(module)
        for path in files:
            rel = path.relative_to(base).as_posix() if path.is_relative_to(base) else path.name
            digest.update(f"{module}:{rel}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:16]

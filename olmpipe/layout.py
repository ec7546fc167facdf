"""Where the workflow reads and writes: the bench folders of the config and every result path.

Kept in the package, not in the ``.smk`` files, so that the rules (through
``workflow/rules/common.smk``) and the stages run without Snakemake (``olmpipe <stage>``,
``python -m olmpipe.<stage>``) use the same paths, tested like any other code. Which code reruns
which rule is :mod:`olmpipe.codeversion`.

Who spells what: this module spells every path from the working directory (stage folders, run
folders, rule outputs) and the names of files and folders that are no record; the name of each
record file inside a folder is spelled once, by its owner in :mod:`olmpipe.records` (with its
reader and writer), and joined here. ``tests/test_paths.py`` fails when a result path or file
name is spelled anywhere else in ``olmpipe/``, ``workflow/`` or the ``Snakefile``.

Adding a path: a constant or function here (a stage folder under :data:`RESULTS`, a run folder, a
rule output), a record file's name in its ``olmpipe.records`` module; rules take them through
``common.smk`` (``from olmpipe.layout import ...``), stages and CLIs import them.

    >>> model_dir({"model": {"path": "embedded"}})
    'results/model/tiny'
    >>> eval_run_files("results/baseline/tiny")["verdicts"]
    'results/baseline/tiny/verdicts.jsonl'
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from olmpipe.records.audit import AUDIT_NAME, AUDIT_SUMMARY_NAME
from olmpipe.records.candidates import CANDIDATE_DIR
from olmpipe.records.comparison import COMPARISON_CSV_NAME, COMPARISON_JSON_NAME
from olmpipe.records.difficulty import DROPPED_NAME, FILTER_NAME, FILTERED_INDEX_NAME, STATS_NAME
from olmpipe.records.difficulty import SUMMARY_NAME as DIFFICULTY_SUMMARY_NAME
from olmpipe.records.generations import GENERATIONS_NAME
from olmpipe.records.manifest import MERGED_MANIFEST_NAME
from olmpipe.records.metrics import final_metrics_path
from olmpipe.records.pages import PAGE_INDEX_NAME
from olmpipe.records.scores import SCORES_CSV_NAME, SCORES_JSON_NAME, SUMMARY_NAME
from olmpipe.records.sft import PAIRS_NAME, PAIRS_SUMMARY_NAME
from olmpipe.records.verdicts import VERDICTS_NAME

RESULTS = PurePosixPath("results")
#: The test files of a bench folder (olmOCR-Bench layout: ``pdfs/**.pdf`` and these, at the top).
BENCH_TESTS_GLOB = "*.jsonl"

#: The synthetic bench stages (rules synth_html, synth_render, synth_tests; ``olmpipe synth``).
SYNTH_DIR = RESULTS / "synth"

RASTERIZE_DIR = RESULTS / "rasterize"
#: The merged manifest of every rendered PDF (rule ``rasterize``).
MANIFEST = RASTERIZE_DIR / MERGED_MANIFEST_NAME
#: Page folders under :data:`RASTERIZE_DIR` of the main bench (``bench.dir``) and the eval bench.
MAIN_PAGES, EVAL_PAGES = "pages", "eval-pages"
#: Content stamps of the benches' input files (:mod:`olmpipe.records.stamps`): the rasterize rule's
#: input instead of the PDFs, the validate rule's instead of the test files.
INPUT_STAMPS_DIR = RASTERIZE_DIR / "inputs"


def input_stamp(pages: str, kind: str) -> str:
    """The stamp of a bench's ``kind`` (``pdfs`` or ``tests``) files; ``pages`` names the bench
    (:data:`MAIN_PAGES`, :data:`EVAL_PAGES`): ``results/rasterize/inputs/pages-pdfs.json``."""
    return str(INPUT_STAMPS_DIR / f"{pages}-{kind}.json")

VALIDATE_DIR = RESULTS / "validate"
#: The page index and the validated tests (rule ``validate``) that training and scoring read.
PAGE_INDEX = VALIDATE_DIR / PAGE_INDEX_NAME
VALIDATED_TESTS = VALIDATE_DIR / "tests"
#: The validate stage's report (counts, every problem, the settings).
VALIDATE_REPORT = VALIDATE_DIR / "report.json"
#: The trivial-answer audit of the validated bench (rule ``validate_audit``): one line per page,
#: answer and guard setting, and its summary.
VALIDATE_AUDIT = VALIDATE_DIR / AUDIT_NAME
VALIDATE_AUDIT_SUMMARY = VALIDATE_DIR / AUDIT_SUMMARY_NAME
#: The difficulty stage (rule ``difficulty``): k completions per training page (its generations and
#: their resume journal, :mod:`olmpipe.records.generations`) and their statistics.
DIFFICULTY_DIR = RESULTS / "difficulty"
DIFFICULTY_STATS = DIFFICULTY_DIR / STATS_NAME
DIFFICULTY_SUMMARY = DIFFICULTY_DIR / DIFFICULTY_SUMMARY_NAME
DIFFICULTY_GENERATIONS = DIFFICULTY_DIR / GENERATIONS_NAME
#: The filter of ``train.difficulty.enabled`` (rule ``difficulty_filter``): the page index training
#: reads, the pages left out with their reason, and the counts.
FILTERED_PAGE_INDEX = DIFFICULTY_DIR / FILTERED_INDEX_NAME
DIFFICULTY_DROPPED = DIFFICULTY_DIR / DROPPED_NAME
DIFFICULTY_FILTER = DIFFICULTY_DIR / FILTER_NAME


def validate_outputs(out_dir: str | Path = VALIDATE_DIR) -> dict[str, str]:
    """The validate stage's outputs in ``out_dir`` (rule ``validate``, ``olmpipe validate --out``):
    ``tests`` (a folder), ``report`` and ``pages`` (the page index)."""
    out = PurePosixPath(str(out_dir))
    return {"tests": str(out / VALIDATED_TESTS.name), "report": str(out / VALIDATE_REPORT.name),
            "pages": str(out / PAGE_INDEX.name)}


def audit_outputs(out_dir: str | Path = VALIDATE_DIR) -> dict[str, str]:
    """The trivial-answer audit's outputs in ``out_dir`` (rule ``validate_audit``, ``olmpipe validate
    --out``): ``records`` (``audit.jsonl``) and ``summary`` (``audit.json``)."""
    out = PurePosixPath(str(out_dir))
    return {"records": str(out / VALIDATE_AUDIT.name), "summary": str(out / VALIDATE_AUDIT_SUMMARY.name)}

#: The embedded default model (rule ``build_model``).
TINY_MODEL_DIR = RESULTS / "model" / "tiny"
#: Models downloaded from the Hugging Face hub (rule ``download_model``): ``<org>--<name>/<revision>/``.
HUB_MODEL_DIR = RESULTS / "model" / "hub"
#: A hub repository id as ``model.path`` may give it: ``org/name`` (no leading ``.`` or ``/``).
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")

#: The SFT stage (rules sft_pairs, sft_seed, sft_soup): its pairs, one run folder per sft seed
#: (the training job's layout, :data:`TRAIN_RUN`), and the soup GRPO starts from.
SFT_DIR = RESULTS / "sft"
SFT_PAIRS = SFT_DIR / PAIRS_NAME
SFT_PAIRS_SUMMARY = SFT_DIR / PAIRS_SUMMARY_NAME
#: An sft seed's run folder, as a rule pattern (wildcard ``seed``).
SFT_RUN = str(SFT_DIR / "seed{seed}")
#: The mean of the sft seeds' final weights (rule ``sft_soup``): the SFT model.
SFT_MODEL_DIR = SFT_DIR / "soup" / "model"

TRAIN_DIR = RESULTS / "train"
#: A seed's run folder, as a rule pattern (wildcard ``seed``): checkpoints, metrics, the final model.
TRAIN_RUN = str(TRAIN_DIR / "seed{seed}")
#: The final model folder of a training run (rule ``train_seed``'s output), inside its run folder.
FINAL_MODEL_NAME = "model"
#: LoRA runs: the trained adapter, beside the final model in the run folder (:mod:`olmpipe.job.peft`).
ADAPTER_NAME = "adapter"
#: Hard links to the files of the last final model a run folder published (no Snakemake output, so a
#: rerun job's output cleanup leaves it; :mod:`olmpipe.job.final`).
KEPT_MODEL_NAME = "model.kept"
#: The average of the seeds' final weights (rule ``soup``), the model the evaluate stage scores.
SOUP_MODEL_DIR = TRAIN_DIR / "soup" / FINAL_MODEL_NAME

BASELINE_DIR = RESULTS / "baseline"
EVALUATE_DIR = RESULTS / "evaluate"
#: The trained-vs-baseline comparison (rule ``evaluate_compare``): GRPO against the model it started
#: from (the base model, or with ``sft.enabled`` the SFT model).
COMPARISON_JSON = EVALUATE_DIR / COMPARISON_JSON_NAME
COMPARISON_CSV = EVALUATE_DIR / COMPARISON_CSV_NAME
#: With ``sft.enabled``: the SFT model against the base model (rule ``evaluate_sft_compare``).
SFT_COMPARISON_JSON = EVALUATE_DIR / f"sft_{COMPARISON_JSON_NAME}"
SFT_COMPARISON_CSV = EVALUATE_DIR / f"sft_{COMPARISON_CSV_NAME}"

REPORT_DIR = RESULTS / "report"
#: The self-contained HTML report (rule ``report_html``) and its plots (rule ``report_plots``).
REPORT_HTML = REPORT_DIR / "index.html"
PLOTS_DIR = REPORT_DIR / "plots"
#: The report's plots, by name (:func:`olmpipe.report.plots.write_plots` draws each one); with
#: ``sft.enabled`` also :data:`SFT_PLOT` (the SFT runs' loss per step).
PLOT_NAMES = ("rewards", "type_rates", "page_change")
SFT_PLOT = "sft_loss"


def in_results(path: str | Path) -> str:
    """``path`` (a path under :data:`RESULTS`, a pattern allowed) relative to the results folder,
    for code that reads a results folder kept anywhere (:mod:`olmpipe.results`, :mod:`olmpipe.rundiff`).

    >>> in_results(PAGE_INDEX)
    'validate/pages.jsonl'
    """
    return str(PurePosixPath(str(path)).relative_to(RESULTS))


def plot_path(name: str, folder: str | Path = PLOTS_DIR) -> str:
    """The PNG of plot ``name`` (one of :data:`PLOT_NAMES`) in ``folder``."""
    return str(PurePosixPath(str(folder)) / f"{name}.png")


def train_run_dir(seed: int | str) -> str:
    """The run folder of seed ``seed``: ``results/train/seed<seed>``."""
    return TRAIN_RUN.format(seed=seed)


def sft_run_dir(seed: int | str) -> str:
    """The run folder of sft seed ``seed``: ``results/sft/seed<seed>``."""
    return SFT_RUN.format(seed=seed)


def seed_of(run_dir: str | Path) -> int | None:
    """The seed of a training run folder (``seed3`` -> 3); None for any other folder (``soup``)."""
    name = Path(run_dir).name
    prefix = PurePosixPath(TRAIN_RUN).name.split("{", 1)[0]
    return int(name[len(prefix):]) if name.startswith(prefix) and name[len(prefix):].isdigit() else None


def final_model_dir(run_dir: str | Path) -> str:
    """The final model folder of a training run folder (``<run>/model``)."""
    return str(PurePosixPath(str(run_dir)) / FINAL_MODEL_NAME)


def kept_model_dir(run_dir: str | Path) -> str:
    """The kept copy of a run's final model (``<run>/model.kept``, :mod:`olmpipe.job.final`)."""
    return str(PurePosixPath(str(run_dir)) / KEPT_MODEL_NAME)


def final_metrics(run_dir: str | Path) -> str:
    """The copy of a run's metrics written beside its final model (``<run>/model.metrics.jsonl``):
    what the report reads, from the workflow and from ``olmpipe report`` alike."""
    return str(final_metrics_path(final_model_dir(run_dir)))


def eval_run_files(run: str | Path) -> dict[str, str]:
    """The outputs of a generate-and-score run folder (:mod:`olmpipe.evaluate.engine`), by rule output name.

    ``run`` is :func:`baseline_run_dir` or :func:`evaluate_run_dir`; ``candidate`` is a folder.
    """
    run = PurePosixPath(str(run))
    return {
        "candidate": str(run / CANDIDATE_DIR),
        "generations": str(run / GENERATIONS_NAME),
        "verdicts": str(run / VERDICTS_NAME),
        "scores": str(run / SCORES_JSON_NAME),
        "scores_csv": str(run / SCORES_CSV_NAME),
        "summary": str(run / SUMMARY_NAME),
    }


def rotated_dir(run_dir: str | Path) -> Path:
    """The rotated page images of the pipeline-compatible mode's retries, in a generation run folder."""
    return Path(run_dir) / "rotated"


@dataclass(frozen=True)
class SynthLayout:
    """The folders and files of the synthetic bench stages under ``root`` (default :data:`SYNTH_DIR`).

    ``html`` (rule synth_html; beside it its answer journal ``html_journal``, not an output),
    ``render`` (synth_render), ``bench`` (synth_tests: an olmOCR-Bench folder) and ``report``.
    """

    root: str = str(SYNTH_DIR)

    def _path(self, name: str) -> str:
        return str(PurePosixPath(self.root) / name)

    @property
    def html(self) -> str:
        return self._path("html")

    @property
    def html_journal(self) -> str:
        return self._path("html-journal.jsonl")

    @property
    def render(self) -> str:
        return self._path("render")

    @property
    def bench(self) -> str:
        return self._path("bench")

    @property
    def report(self) -> str:
        return self._path("report.json")


#: The workflow's synthetic bench (``results/synth/bench``).
SYNTH_BENCH_DIR = SynthLayout().bench


def bench_section(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``bench`` config section every stage reads: unchanged unless ``synth.enabled``.

    With ``synth.enabled`` the stages train on the bench ``synth_tests`` writes
    (:data:`SYNTH_BENCH_DIR`) and evaluate on the real one: ``dir`` becomes the synthetic bench and
    ``eval_dir`` the real eval bench (``bench.eval_dir``, or ``bench.dir`` when that is null). With
    a separate eval bench, validate assigns every page of ``dir`` to train and every page of
    ``eval_dir`` to eval, so no synthetic page is scored in evaluation and no real page is trained
    on. With ``synth.eval: held_out`` there is no eval bench: ``bench.split`` splits the synthetic
    pages into train and held-out eval pages (the learning run, ``config/learn.yaml``). The workflow (``common.smk``) and the ``olmpipe rasterize``/``validate`` commands call this
    one function, so they read the same benches. Applying it twice changes nothing.

    >>> cfg = {"bench": {"dir": "data/bench/x", "eval_dir": None, "split": {}},
    ...        "synth": {"enabled": True, "eval": "real"}}
    >>> bench_section(cfg)["dir"], bench_section(cfg)["eval_dir"]
    ('results/synth/bench', 'data/bench/x')
    """
    bench = copy.deepcopy(dict(cfg["bench"]))
    if cfg["synth"]["enabled"]:
        if cfg["synth"]["eval"] == "held_out":
            # train and eval pages both of the synthetic bench, split by bench.split
            bench["eval_dir"] = None
        else:
            bench["eval_dir"] = bench["eval_dir"] or bench["dir"]
        bench["dir"] = SYNTH_BENCH_DIR
    return bench


def stage_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with the ``bench`` section the stages read (:func:`bench_section`), as the workflow has it."""
    return {**cfg, "bench": bench_section(cfg)}


def page_dir_for(stem: str, root: str | Path = RASTERIZE_DIR / MAIN_PAGES) -> Path:
    """Folder that holds the rendered pages and ``manifest.json`` of one PDF."""
    return Path(root) / stem


class ModelPathError(ValueError):
    """``model.path`` names no model the workflow can load; the message says what to set."""


def revision_problem(revision: str) -> str | None:
    """Why ``revision`` is neither a git ref name (a branch or tag: ``git check-ref-format --allow-onelevel``'s
    rules) nor a commit hash, or None. Its folder is ``<revision>`` under the repository's download folder
    (:func:`hub_model_dir`): ``..`` or ``.`` would name a folder above or the same, another revision's.

    >>> revision_problem("refs/pr/1") is None, revision_problem("..")
    (True, "has '..' in it")
    """
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in revision):
        return "has a control character in it"
    bad = sorted({ch for ch in revision if ch in " ~^:?*[\\"})
    if bad:
        return f"has {' '.join(repr(ch) for ch in bad)} in it"
    for part, reason in (("..", "has '..' in it"), ("@{", "has '@{' in it"), ("//", "has an empty part ('//')")):
        if part in revision:
            return reason
    if revision == "@":
        return "is '@'"
    if revision.startswith("/") or revision.endswith("/"):
        return "begins or ends with '/'"
    if revision.endswith("."):
        return "ends with '.'"
    for part in revision.split("/"):
        if part.startswith("."):
            return f"has a part beginning with '.' ({part!r})"
        if part.endswith(".lock"):
            return f"has a part ending in '.lock' ({part!r})"
    return None


def hub_model(cfg: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(repo id, revision)`` when ``model.path`` is a hub id to download, else None.

    ``model.path`` is a hub id when it is no existing file or folder (read from the working
    directory) and has the form ``org/name``, the rule ``transformers`` applies too; any other path
    is a local folder (one that does not exist is a missing input of the jobs). A hub id needs
    ``model.revision`` (what is downloaded, once): raises :class:`ModelPathError` without it.

    >>> hub_model({"model": {"path": "allenai/olmOCR-7B-0825", "revision": "main"}})
    ('allenai/olmOCR-7B-0825', 'main')
    """
    path = cfg["model"]["path"]
    if path == "embedded" or os.path.exists(path) or not HUB_ID.fullmatch(path):
        return None
    revision = cfg["model"]["revision"]
    if not revision:
        raise ModelPathError(f"model.path {path!r} is a hub id: set model.revision to the revision to download "
                             f"once into {HUB_MODEL_DIR}/ (a commit hash pins it; a branch or tag is resolved "
                             "to a commit at the first download)")
    problem = revision_problem(revision)
    if problem is not None:
        raise ModelPathError(f"model.revision {revision!r} is not a git branch, tag or commit: it {problem}; give "
                             f"the branch, tag or commit hash of {path} to download (e.g. main, v1.0, refs/pr/1 or a "
                             "40-digit commit)")
    return path, revision


def model_path_problem(cfg: Mapping[str, Any]) -> str | None:
    """Why ``model.path`` names no model (None: ``embedded``, a Hugging Face model folder, or a hub id).

    Checked with the config, so that a typo stops the workflow before any job with a message naming
    the key, instead of a Hugging Face "Repo id must be ..." traceback in the first job that loads
    the model. A path that does not exist is a hub id only in the form ``org/name`` (:data:`HUB_ID`,
    as :func:`hub_model` reads it).
    """
    path = cfg["model"]["path"]
    if path != "embedded" and HUB_ID.fullmatch(path) and not os.path.exists(path) and cfg["model"]["revision"]:
        try:
            hub_model(cfg)
        except ModelPathError as exc:  # a revision that is no git ref (a missing one: the Snakefile says so)
            return str(exc)
    if path == "embedded" or (HUB_ID.fullmatch(path) and not os.path.exists(path)):
        return None
    folder = Path(path)
    if not folder.exists():
        return (f"model.path: {path!r} does not exist (a relative path is read from the working directory, "
                f"{Path.cwd()}) and is not a hub id (org/name); give a Hugging Face model folder, a hub id or "
                "`embedded`")
    if not (folder / "config.json").is_file():
        return f"model.path: {path!r} is not a Hugging Face model folder (it has no config.json)"
    return None


#: The tiny model's default architecture (``model.tiny.architecture``), built into :data:`TINY_MODEL_DIR`.
DEFAULT_TINY_ARCHITECTURE = "qwen2_5_vl"


def tiny_model_dir(architecture: str) -> str:
    """The folder of the embedded tiny model of ``architecture``: :data:`TINY_MODEL_DIR` for the
    default one, ``results/model/tiny-<architecture>`` for another, so that switching the
    architecture and back rebuilds nothing and deletes no model (docs/reruns.md)."""
    if architecture == DEFAULT_TINY_ARCHITECTURE:
        return str(TINY_MODEL_DIR)
    return str(TINY_MODEL_DIR.with_name(f"{TINY_MODEL_DIR.name}-{architecture}"))


def hub_model_dir(repo_id: str, revision: str) -> str:
    """The folder a hub model's revision is downloaded into: ``results/model/hub/<org>--<name>/<revision>``
    (``/`` in a revision such as ``refs/pr/1`` becomes ``--``)."""
    return str(HUB_MODEL_DIR / repo_id.replace("/", "--") / revision.replace("/", "--"))


def model_dir(cfg: Mapping[str, Any]) -> str:
    """The model folder the stages load: the built tiny model when ``model.path`` is ``embedded``, the
    downloaded folder (:func:`hub_model_dir`) for a hub id, else ``model.path`` itself.

    No job resolves a hub id: the ``download_model`` rule fetches it on the submitting machine, and
    the jobs read its folder offline (:mod:`olmpipe.models.hub`).
    """
    if cfg["model"]["path"] == "embedded":
        return tiny_model_dir(cfg["model"]["tiny"]["architecture"])
    hub = hub_model(cfg)
    return hub_model_dir(*hub) if hub else cfg["model"]["path"]


def model_input(cfg: Mapping[str, Any]) -> list[str]:
    """The model folder as a rule input, ``[folder]``: built (``build_model``), downloaded
    (``download_model``) or local (a relative path is read from the working directory)."""
    return [model_dir(cfg)]


def baseline_run_dir(cfg: Mapping[str, Any]) -> str:
    """Run folder of the base model's generation and scores: ``results/baseline/<model.name>``."""
    return str(BASELINE_DIR / cfg["model"]["name"])


def evaluate_run_dir(cfg: Mapping[str, Any]) -> str:
    """Run folder of the trained model's generation and scores (the baseline's layout):
    ``results/evaluate/<model.name>``."""
    return str(EVALUATE_DIR / cfg["model"]["name"])


def sft_model_name(cfg: Mapping[str, Any]) -> str:
    """Display name of the SFT model in tables and the report: ``<model.name>+sft``."""
    return f"{cfg['model']['name']}+sft"


def sft_eval_run_dir(cfg: Mapping[str, Any]) -> str:
    """Run folder of the SFT model's generation and scores (the baseline's layout):
    ``results/evaluate/<model.name>+sft``."""
    return str(EVALUATE_DIR / sft_model_name(cfg))


def grpo_base_dir(cfg: Mapping[str, Any]) -> str:
    """The model GRPO starts from: the SFT model with ``sft.enabled``, else the base model folder."""
    return str(SFT_MODEL_DIR) if cfg["sft"]["enabled"] else model_dir(cfg)


def train_page_index(cfg: Mapping[str, Any]) -> str:
    """The page index training reads: the difficulty filter's when ``train.difficulty.enabled``,
    else the validate stage's."""
    return str(FILTERED_PAGE_INDEX if cfg["train"]["difficulty"]["enabled"] else PAGE_INDEX)

"""The model stage for offline nodes: a hub id is downloaded once, on the submitting machine, into
results/model/hub/, and every job reads that folder with the hub switched off.

"The hub" is a Hugging Face cache built in the test (``support.hfcache``: the documented layout
of blobs, refs and snapshots) holding the embedded tiny model under a hub id; the network is off
(``HF_HUB_OFFLINE=1``) for the download, and the jobs after it run with a hub endpoint that records
every request and answers 503, so that a job that tried the hub would fail and be seen.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from benchdata import REPO, make_small_bench
from support.hfcache import add_to_cache, shard_weights
from support.localhttp import LocalHttpServer, QuietHandler

from olmpipe.config import ConfigError, load_config
from olmpipe.layout import ModelPathError, hub_model, hub_model_dir, model_dir, model_input
from olmpipe.models.folder import ModelFolderError
from olmpipe.models.hub import MANIFEST_NAME, OFFLINE_ENV

REPO_ID = "test-org/tiny-vlm"
HUB_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_CACHE", "HF_HOME",
            "HF_ENDPOINT")


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory, tiny_model_dir: Path) -> tuple[Path, str]:
    """A Hugging Face cache with the tiny model as test-org/tiny-vlm (branch main); its commit."""
    cache = tmp_path_factory.mktemp("hf") / "hub"
    return cache, add_to_cache(cache, REPO_ID, tiny_model_dir)


def hub_env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in HUB_VARS}
    return {**env, "HF_HUB_CACHE": str(cache), **extra}


def download(cache: Path, revision: str, out: Path, **extra: str) -> subprocess.CompletedProcess:
    """`olmpipe download-model` in a child (huggingface_hub reads HF_HUB_CACHE when imported)."""
    return subprocess.run([sys.executable, "-m", "olmpipe.cli", "download-model", "--repo", REPO_ID,
                           "--revision", revision, "--out", str(out)],
                          env=hub_env(cache, HF_HUB_OFFLINE="1", **extra), capture_output=True, text=True,
                          timeout=300, check=False)


def test_hub_ids_map_to_download_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = {"model": {"path": REPO_ID, "revision": "refs/pr/1"}}
    assert hub_model(cfg) == (REPO_ID, "refs/pr/1")
    assert model_dir(cfg) == "results/model/hub/test-org--tiny-vlm/refs--pr--1"
    assert model_input(cfg) == [model_dir(cfg)]
    # the embedded model and an existing folder (even one shaped like a hub id) are no hub ids
    assert hub_model({"model": {"path": "embedded", "revision": None}}) is None
    (tmp_path / "local" / "model").mkdir(parents=True)
    assert hub_model({"model": {"path": "local/model", "revision": None}}) is None
    assert model_dir({"model": {"path": "local/model", "revision": None}}) == "local/model"
    with pytest.raises(ModelPathError, match="set model.revision"):
        model_dir({"model": {"path": REPO_ID, "revision": None}})
    # a path that is no hub id stays a (missing) local folder: the jobs' missing input
    assert model_dir({"model": {"path": "/no/such/model", "revision": None}}) == "/no/such/model"


@pytest.mark.parametrize("revision", ["..", ".", "main/..", "../main", "a..b", ".hidden", "main.lock", "main/",
                                      "/main", "a//b", "with space", "tag~1", "x^2", "a:b", "what?", "st*r", "[x]",
                                      "back\\slash", "at@{1}", "@", "tab\tx", "main."])
def test_a_revision_that_is_no_git_ref_or_commit_is_refused(revision, tmp_path, monkeypatch):
    """Issue 31 item 6: `model.revision: ".."` passed the config check and mapped onto an existing folder
    (results/model/hub/<org>--<name>/.. is results/model/hub), so download_model was not scheduled and
    training failed on a missing config.json. A revision is a git ref name or a commit hash."""
    from olmpipe.config import check_workflow_config
    from olmpipe.layout import model_path_problem

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results/model/hub/test-org--tiny-vlm").mkdir(parents=True)  # another revision's folder
    cfg = {"model": {"path": REPO_ID, "revision": revision}}
    message = f"model.revision {revision!r} is not a git branch, tag or commit"
    with pytest.raises(ModelPathError, match=re.escape(message)):
        model_dir(cfg)
    assert message in (model_path_problem(cfg) or "")
    from snakemake.exceptions import WorkflowError

    with pytest.raises(WorkflowError, match=re.escape(message)):
        check_workflow_config({"model": {"path": REPO_ID, "revision": revision}})


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "feature/x-y_z", "0" * 40, "a1b2c3d",
                                      "release-2025.01"])
def test_git_refs_and_commits_are_revisions(revision):
    assert hub_model({"model": {"path": REPO_ID, "revision": revision}}) == (REPO_ID, revision)


def test_download_from_the_cache_with_the_network_off(tmp_path: Path, hub_cache: tuple[Path, str],
                                                      tiny_model_dir: Path) -> None:
    cache, commit = hub_cache
    out = tmp_path / hub_model_dir(REPO_ID, commit)
    proc = download(cache, commit, out)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert (manifest["repo_id"], manifest["revision"], manifest["commit"]) == (REPO_ID, commit, commit)
    originals = {p.relative_to(tiny_model_dir).as_posix(): p for p in tiny_model_dir.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == set(originals)
    for rel, original in originals.items():
        copied = out / rel
        # real files with the cache's bytes (no links a compute node could not follow)
        assert not copied.is_symlink() and copied.read_bytes() == original.read_bytes(), rel
    assert "branch or tag" not in proc.stderr  # a commit hash is pinned: no warning

    # the model loads from the folder with the hub off, with the weights of the original
    code = ("import sys, torch\nfrom olmpipe.models.load import load_model_and_processor\n"
            "a, _ = load_model_and_processor(sys.argv[1], device='cpu')\n"
            "b, _ = load_model_and_processor(sys.argv[2], device='cpu')\n"
            "sa, sb = a.state_dict(), b.state_dict()\n"
            "assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)\n")
    check = subprocess.run([sys.executable, "-c", code, str(out), str(tiny_model_dir)], capture_output=True,
                           text=True, env=hub_env(cache, **OFFLINE_ENV), timeout=300, check=False)
    assert check.returncode == 0, check.stderr[-3000:]

    # once: a second run leaves the folder alone
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert download(cache, commit, out).returncode == 0
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_branch_is_resolved_once_through_refs(tmp_path: Path, hub_cache: tuple[Path, str]) -> None:
    cache, commit = hub_cache
    out = tmp_path / hub_model_dir(REPO_ID, "main")
    (out.parent / (out.name + ".tmp")).mkdir(parents=True)  # a staging folder left by a killed download
    (out.parent / (out.name + ".tmp") / "junk").write_text("x")
    proc = download(cache, "main", out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / MANIFEST_NAME).read_text())["commit"] == commit
    assert f"set model.revision: {commit}" in proc.stderr
    assert not (out / "junk").exists() and not (out.parent / (out.name + ".tmp")).exists()


def test_a_partial_or_missing_snapshot_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    cache = tmp_path / "hub"
    commit = add_to_cache(cache, REPO_ID, tiny_model_dir, skip=("config.json",))
    out = tmp_path / "out"
    proc = download(cache, commit, out)
    assert proc.returncode == 1 and "lacks config.json" in proc.stderr, proc.stderr
    assert not out.exists() and not (tmp_path / "out.tmp").exists()
    proc = download(tmp_path / "empty", "main", out)
    assert proc.returncode == 1 and "is not (completely) in the Hugging Face cache" in proc.stderr, proc.stderr
    assert not out.exists()



def refused(proc: subprocess.CompletedProcess, cache: Path, revision: str, out: Path, lacks: str) -> None:
    """The download failed saying what the snapshot lacks, where the cache is, which model.path and
    model.revision, and how to fix it; nothing was published."""
    err = proc.stderr
    assert proc.returncode == 1, err
    assert f"model.path {REPO_ID} at model.revision {revision!r}" in err and f"Hugging Face cache {cache}" in err, err
    assert f"lacks {lacks}" in err, err
    assert "nothing was published" in err and "on a machine with network (HF_HUB_OFFLINE unset)" in err, err
    assert f"olmpipe download-model --repo {REPO_ID} --revision {revision} --out {out}" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("skip, lacks", [
    (("model.safetensors",), ("the model weights (model.safetensors, or model.safetensors.index.json with every "
                              "shard it names, or pytorch_model.bin)")),
    (("tokenizer_config.json", "chat_template.jinja"),
     "the tokenizer settings (tokenizer_config.json: special tokens, padding side) and a chat template"),
    (("processor_config.json",), "the image processor settings (preprocessor_config.json, or processor_config.json"),
])
def test_a_snapshot_that_would_not_load_is_not_published(tmp_path: Path, tiny_model_dir: Path, skip, lacks) -> None:
    """A snapshot read offline from an interrupted download (here: without its weights, its tokenizer
    settings or its image processor) is refused: published, it would be a finished rule output that
    Snakemake never fetches again and every job fails on."""
    cache = tmp_path / "hub"
    add_to_cache(cache, REPO_ID, tiny_model_dir, skip=skip)
    out = tmp_path / "out"
    refused(download(cache, "main", out), cache, "main", out, lacks)
    assert not out.exists() and not (tmp_path / "out.tmp").exists()


def test_a_sharded_snapshot_needs_every_shard_and_every_blob(tmp_path: Path, tiny_model_dir: Path) -> None:
    sharded = tmp_path / "sharded"
    shutil.copytree(tiny_model_dir, sharded)
    files = shard_weights(sharded)
    cache = tmp_path / "hub"
    add_to_cache(cache, REPO_ID, sharded, skip=(files[1],))
    out = tmp_path / "out"
    refused(download(cache, "main", out), cache, "main", out, f"{files[1]} (named by model.safetensors.index.json)")
    # every file there, but a blob pruned from the cache by hand: its link points nowhere
    cache = tmp_path / "hub2"
    commit = add_to_cache(cache, REPO_ID, sharded)
    link = cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / commit / "generation_config.json"
    link.resolve().unlink()
    refused(download(cache, commit, out), cache, commit, out,
            "generation_config.json (its link in the cache points at no blob)")
    assert not out.exists()
    (tmp_path / "hub3").mkdir()
    commit = add_to_cache(tmp_path / "hub3", REPO_ID, sharded)
    proc = download(tmp_path / "hub3", commit, out)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} >= {*files, "model.safetensors.index.json"}


def test_a_published_folder_that_lost_files_is_refused_then_restored_in_place(
        tmp_path: Path, hub_cache: tuple[Path, str], tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading side: a download folder whose weights were deleted later stops the config check
    (the Snakefile's and every job's) and the loader with one message naming the folder, model.path,
    model.revision and the command; that command puts the lost file back in place, leaving the
    rest of the folder (and the rule's timestamp) alone, so nothing that used the folder reruns."""
    from olmpipe.models.load import load_model_and_processor

    cache, commit = hub_cache
    monkeypatch.chdir(tmp_path)
    folder = hub_model_dir(REPO_ID, commit)
    out = tmp_path / folder
    assert download(cache, commit, out).returncode == 0
    (out / ".snakemake_timestamp").write_text("")
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()}
    (out / "model.safetensors").unlink()

    with pytest.raises(ConfigError) as info:
        load_config(overrides={"model": {"path": REPO_ID, "revision": commit}})
    message = str(info.value)
    assert f"model.path: {folder} lacks the model weights (model.safetensors" in message, message
    assert f"the download of model.path {REPO_ID} at model.revision {commit}" in message, message
    assert f"`olmpipe download-model --repo {REPO_ID} --revision {commit} --out {folder}`" in message, message
    with pytest.raises(ModelFolderError, match=f"^{out} lacks the model weights"):
        load_model_and_processor(out, device="cpu")

    proc = download(cache, commit, out)
    assert proc.returncode == 0, proc.stderr
    assert "restored 1 file(s)" in proc.stderr, proc.stderr
    assert (out / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()}
    assert {k: v for k, v in after.items() if k not in ("model.safetensors", MANIFEST_NAME)} == {
        k: v for k, v in before.items() if k not in ("model.safetensors", MANIFEST_NAME)}
    assert load_config(overrides={"model": {"path": REPO_ID, "revision": commit}})["model"]["revision"] == commit


def test_a_folder_published_without_weights_is_completed_once_the_cache_has_them(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """A folder an older olmpipe published from a partial snapshot (manifest, no weights): rerunning
    the download offline with the cache still partial refuses and leaves the folder as it is; once
    the cache holds the weights (a download with network), the same command completes it."""
    cache = tmp_path / "hub"
    commit = add_to_cache(cache, REPO_ID, tiny_model_dir, commit="c" * 40, skip=("model.safetensors",))
    out = tmp_path / "out"
    shutil.copytree(tiny_model_dir, out, ignore=shutil.ignore_patterns("model.safetensors"))
    files = {p.name: p.stat().st_size for p in out.iterdir()}
    (out / MANIFEST_NAME).write_text(json.dumps({"repo_id": REPO_ID, "revision": "main", "commit": commit,
                                                 "files": files}))
    refused(download(cache, "main", out), cache, "main", out, "the model weights")
    assert sorted(p.name for p in out.iterdir()) == sorted([*files, MANIFEST_NAME])
    add_to_cache(cache, REPO_ID, tiny_model_dir, commit=commit)  # the network run fetched the rest
    proc = download(cache, "main", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    assert "model.safetensors" in json.loads((out / MANIFEST_NAME).read_text())["files"]

CONFIG = {
    "bench": {"dir": "bench", "split": {"eval_fraction": 0.34}},
    "rasterize": {"longest_side": 200},
    "validate": {"check_math": False},
    "model": {"name": "hub-tiny", "path": REPO_ID},
    "rewards": {"bench": {"processes": 0}},
    "eval_run": {"max_pages": 2},
    "generation": {"max_new_tokens": 8},
    "train": {"seeds": [0], "wandb": {"mode": "disabled"},
              "grpo": {"max_steps": 1, "max_completion_length": 8, "save_steps": 1}},
}


def snakemake(workdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
                           "--cores", "2", "--nolock", *args], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, f"snakemake failed:\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
    return proc


LOCAL_RULES = """
import sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(), config_settings=ConfigSettings(),
                            storage_settings=StorageSettings(), snakefile=Path(sys.argv[1]), workdir=Path("."))
    # the rules declared `localrule: True` (Snakemake 9 keeps their names in Workflow._localrules)
    print(" ".join(sorted(workflow._workflow._localrules)))
"""


def local_rules(workdir: Path) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", LOCAL_RULES, str(REPO / "Snakefile")], cwd=workdir,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(proc.stdout.split())


class Recorder(QuietHandler):
    """A hub endpoint that records every request and fails it."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(f"{self.command} {self.path} {self.headers.get('user-agent')}")
        self.send_response(503)
        self.end_headers()

    do_HEAD = do_POST = do_GET


@pytest.mark.slow
def test_jobs_read_the_downloaded_folder_and_never_the_hub(tmp_path: Path, hub_cache: tuple[Path, str]) -> None:
    """The workflow on a hub id: `download_model` runs as a local rule with the network off; then
    baseline generation and a training seed run with the hub reachable only through a recording
    endpoint: their commands name the folder (never the hub id) under HF_HUB_OFFLINE=1, and the
    endpoint sees no request."""
    cache, commit = hub_cache
    make_small_bench(tmp_path / "bench")
    (tmp_path / "config").mkdir()
    config = {**CONFIG, "model": {**CONFIG["model"], "revision": commit}}
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    folder = hub_model_dir(REPO_ID, commit)
    targets = ["results/baseline/hub-tiny/scores.json", "results/train/seed0/model"]

    plan = snakemake(tmp_path, hub_env(cache, HF_HUB_OFFLINE="1"), "-n", "-p", *targets)
    text = plan.stdout + plan.stderr
    assert "rule download_model:" in text
    assert local_rules(tmp_path) == {"download_model"}  # runs where Snakemake runs, never on a node
    commands = [line for line in text.splitlines() if " --model " in line]
    assert len(commands) == 2
    for command in commands:  # baseline_generate, train_seed
        assert f"--model {folder}" in command and "env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1" in command
        assert REPO_ID not in command.split("--config-json")[0].split("--settings")[0]

    snakemake(tmp_path, hub_env(cache, HF_HUB_OFFLINE="1"), "download_model")
    assert json.loads((tmp_path / folder / MANIFEST_NAME).read_text())["commit"] == commit

    Recorder.seen = []
    with LocalHttpServer(Recorder) as hub:
        env = hub_env(cache, HF_ENDPOINT=hub.base_url)  # the hub "reachable": jobs must not ask it
        second = snakemake(tmp_path, env, *targets)
        text = second.stdout + second.stderr
        assert "download_model" not in re.findall(r"rule (\w+):", text)  # once
        assert Recorder.seen == [], Recorder.seen
        # the endpoint works: a job that asked it would have been recorded (and failed)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with pytest.raises(urllib.error.HTTPError, match="503"):
            opener.open(f"{hub.base_url}/api/models/{REPO_ID}", timeout=30)
        assert len(Recorder.seen) == 1
    assert (tmp_path / "results" / "train" / "seed0" / "model" / "config.json").exists()
    assert (tmp_path / "results" / "baseline" / "hub-tiny" / "scores.json").exists()


def test_a_damaged_blob_in_the_cache_is_named_with_how_to_fetch_it_again(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Probe2 G7: the download folder's files are hard links to the cache's blobs, so cutting the
    folder's weights short in place cuts the cache's copy too; the refusal said "run the download
    again ... it fetches only the files the cache lacks", which fetches nothing (the blob is there).
    It names the damaged blob to delete; once the cache has a whole copy again the folder is restored."""
    cache = tmp_path / "hub"
    commit = add_to_cache(cache, REPO_ID, tiny_model_dir)
    out = tmp_path / "out"
    assert download(cache, commit, out).returncode == 0
    blob = (cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / commit / "model.safetensors").resolve()
    assert (out / "model.safetensors").stat().st_ino == blob.stat().st_ino
    with open(out / "model.safetensors", "r+b") as fh:  # a write into the folder in place
        fh.truncate(1000)
    proc = download(cache, commit, out)
    assert proc.returncode == 1 and f"The cache holds a damaged copy ({blob}), which a download does not fetch " \
        "again: delete it" in proc.stderr, proc.stderr
    blob.unlink()
    add_to_cache(cache, REPO_ID, tiny_model_dir)  # what the download with network does
    proc = download(cache, commit, out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_download_models_refusal_is_in_its_log(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Issue 31 item 7: download_model's refusal (a truncated blob in the cache) was printed on
    Snakemake's stderr, while its log, which Snakemake points to, was empty. The log has the refusal
    and its traceback; Snakemake's stderr names the rule's one line and the log."""
    cache = tmp_path / "hub"
    commit = add_to_cache(cache, REPO_ID, tiny_model_dir)
    blob = (cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / commit / "model.safetensors").resolve()
    with open(blob, "r+b") as fh:
        fh.truncate(1000)
    make_small_bench(tmp_path / "bench")
    (tmp_path / "config").mkdir()
    config = {**CONFIG, "model": {**CONFIG["model"], "revision": commit}}
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                           "--cores", "1", "--nolock", "download_model"], env=hub_env(cache, HF_HUB_OFFLINE="1"),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode != 0, proc.stderr[-3000:]
    log = (tmp_path / "logs" / "download_model" / "download_model.log").read_text()
    assert f"The cache holds a damaged copy ({blob})" in log, log
    assert "download_model: model.path test-org/tiny-vlm" in proc.stderr, proc.stderr[-3000:]
    assert "logs/download_model/download_model.log" in proc.stderr


def test_a_scripts_error_and_its_traceback_go_to_its_log(tmp_path: Path) -> None:
    """olmpipe.rulejob.rule_job: an unexpected error is logged with its traceback and ends the job with
    one line naming the rule and the log; a script's own refusal (SystemExit with a message) is logged."""
    from olmpipe.rulejob import rule_job

    log = tmp_path / "rule.log"
    with pytest.raises(SystemExit) as caught, rule_job(log, "some_rule"):
        raise ZeroDivisionError("nothing to divide")
    assert str(caught.value.code) == f"some_rule: nothing to divide\n(the traceback is in {log})"
    text = log.read_text()
    assert "some_rule: ZeroDivisionError" in text and "ZeroDivisionError: nothing to divide" in text, text
    assert "Traceback" in text, text
    with pytest.raises(SystemExit, match="some_rule: refused"), rule_job(log, "some_rule"):
        raise SystemExit("some_rule: refused, for a reason")
    assert "some_rule: refused, for a reason" in log.read_text()


def test_every_file_job_sends_its_errors_to_its_log(tmp_path: Path):
    """The file-to-file rules run `python -m olmpipe.rulejobs` through `shell:` (no `script:`: it
    leaves the interpreter path unquoted): a job's unexpected error lands in the rule's log with its
    traceback, and the job ends with one line naming the rule and the log on standard error."""
    rules = sorted((REPO / "workflow" / "rules").glob("*.smk"))
    assert rules and not (REPO / "workflow" / "scripts").exists()
    for smk in rules:
        assert "    script:" not in smk.read_text(), f"{smk.name} has a script: rule"
    log = tmp_path / "logs" / "soup" / "soup.log"
    files = json.dumps({"input": {"models": [str(tmp_path / "no such model")]},
                        "output": {"model": str(tmp_path / "soup")}, "threads": 1})
    proc = subprocess.run([sys.executable, "-m", "olmpipe.rulejobs", "soup", "--log", str(log), "--files", files,
                           "--param", "soup", '{"dtype": "source"}'], capture_output=True, text=True, check=False,
                          cwd=REPO)
    assert proc.returncode != 0
    assert f"(the traceback is in {log})" in proc.stderr and proc.stderr.startswith("soup: "), proc.stderr
    text = log.read_text()
    assert "Traceback" in text and "soup: " in text, text
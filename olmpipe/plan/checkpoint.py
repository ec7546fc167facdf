"""Checkpoints of a training job: their size, the disk a seed keeps, the time to write one, and
whether the stop grace and SLURM's signal lead leave that time. Part of ``olmpipe plan``.

    olmpipe plan --configfile config/olmocr2.yaml      # the checkpoint table below the memory table

At 7B scale a checkpoint is large: under ZeRO-2 (olmOCR 2's recipe) it holds a 16-bit copy of the
weights for people (``model.safetensors``, transformers' ``save_model``), DeepSpeed's 16-bit module
and its float32 master weights with both AdamW moments, about 16 bytes per parameter, ~130 GB for
Qwen2.5-VL-7B. After SIGTERM (preemption, walltime) the ranks finish the step in flight and write
one, and the job must survive until it is on disk: ``resources.train.stop_grace_s`` (how long the
supervisor lets the ranks run after the signal) and the SLURM profile's ``--signal=TERM@<s>`` (how
long before the walltime SLURM sends it) must both exceed the write time at
``resources.train.checkpoint_write_gbps``, or every preemption loses up to ``save_steps`` steps.

What makes preemption cheaper here: the checkpoint written *because of* a signal
(:class:`olmpipe.job.callbacks.StopOnSignal`) leaves out the weights copy under DeepSpeed
(:meth:`olmpipe.train.trainer.ResumableGRPOTrainer.save_model`): a DeepSpeed resume reads the
module and the float32 masters from DeepSpeed's own files, so the copy is for people only
(~2 bytes per parameter, 16.6 GB at 7B, all written by rank 0). Under ``single``/``ddp`` every byte
of a checkpoint (float32 weights, two moments) is needed to resume exactly. The rest is the
operator's trade: a smaller ``save_steps`` loses fewer steps to a SIGKILL at the cost of a write
every ``save_steps``; faster storage shortens every write.

Sizes are GB (10**9 bytes, what storage is sold and measured in); bytes per parameter are checked
against the files real CPU runs write (``tests/test_train_precision.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.job.kinds import GRPO, JobKind
from olmpipe.layout import RESULTS

GB = 1e9
#: Seconds before the end that SLURM signals when ``--signal`` names no time (sbatch(1): 60).
SLURM_DEFAULT_SIGNAL_S = 60
#: SLURM's ``--signal=[{R|B}:]<sig>[@<time>]`` (sbatch(1)).
_SIGNAL = re.compile(r"--signal[= ](?:([A-Za-z]+):)?([A-Za-z0-9]+)(?:@(\d+))?")


def checkpoint_bytes_per_param(strategy: str, weight_bytes: int, compute_bytes: int) -> dict[str, float]:
    """Bytes per parameter of one periodic checkpoint folder (every rank's files), by part.

    ``weight_bytes``: the parameters' dtype outside DeepSpeed (4: float32 masters; 2: pure bf16);
    ``compute_bytes``: 2 under bf16 mixed precision. What transformers 5.24 writes
    (``Trainer._save_checkpoint``, ``trainer.py:3363-3405``): ``save_model`` (the weights as a
    Hugging Face folder), then per strategy (``_save_optimizer_and_scheduler``, ``trainer.py:3552-3573``):
    ``optimizer.pt`` (AdamW's two moments in the parameters' dtype); DeepSpeed's ``save_checkpoint``
    (ZeRO-2: the 16-bit module, and float32 masters + two moments, sharded); FSDP's whole model and
    optimizer again (``FULL_STATE_DICT``).
    """
    w, c = weight_bytes, compute_bytes
    masters = 8 + (4 if c < 4 else 0)  # + float32 master copy when the module is 16-bit
    table: dict[str, dict[str, float]] = {
        "single": {"weights": w, "AdamW moments": 2 * w},
        "ddp": {"weights": w, "AdamW moments": 2 * w},
        "zero2": {"weights copy": c, "DeepSpeed module": c, "DeepSpeed optimizer": masters},
        "zero3": {"weights copy": c, "DeepSpeed optimizer": masters},
        "fsdp": {"weights copy": 4, "FSDP model": 4, "AdamW moments": 8},
    }
    return table[strategy]


def resume_only_parts(strategy: str) -> tuple[str, ...]:
    """Parts a checkpoint written on a stop signal leaves out (a resume does not read them)."""
    return ("weights copy",) if strategy in ("zero2", "zero3") else ()


def signal_lead_s(slurm_extra: str | None) -> tuple[int, str] | None:
    """(seconds, signal) of ``--signal`` in a rule's ``slurm_extra`` (e.g. ``'--signal=TERM@300'``), or None.

    >>> signal_lead_s("'--signal=TERM@300 --exclusive'")
    (300, 'TERM')
    >>> signal_lead_s("--signal=B:USR1")
    (60, 'USR1')
    """
    match = _SIGNAL.search(slurm_extra or "")
    if match is None:
        return None
    name = match.group(2).upper().removeprefix("SIG")
    return (int(match.group(3)) if match.group(3) else SLURM_DEFAULT_SIGNAL_S, "TERM" if name == "15" else name)


class ProfileError(ValueError):
    """A Snakemake profile that cannot be read (the message names the file)."""


def profile_slurm_extra(profile: str | Path, rule_name: str = "train_seed") -> str | None:
    """A training rule's ``slurm_extra`` in a Snakemake profile folder (``set-resources.<rule>``)."""
    import yaml

    path = Path(profile) / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"{path}: cannot read the profile: {exc}") from exc
    rule = ((data.get("set-resources") or {}) if isinstance(data, dict) else {}).get(rule_name) or {}
    value = rule.get("slurm_extra") if isinstance(rule, dict) else None
    return str(value) if value is not None else None


@dataclass(frozen=True)
class CheckpointPlan:
    """Disk and write time of one seed's checkpoints (see the module docstring)."""

    strategy: str
    parameters: int
    parts: Mapping[str, float]
    left_out: tuple[str, ...]
    model_bytes_per_param: float
    kept: int | None
    seeds: int
    write_gbps: float
    stop_grace_s: float | None
    signal: tuple[int, str] | None
    signal_source: str
    problems: tuple[str, ...]
    #: the trainer's config section (``train``; ``sft``), named in the table and the messages
    section: str = "train"
    knobs_key: str = "grpo"

    @property
    def checkpoint_gb(self) -> float:
        return self.parameters * sum(self.parts.values()) / GB

    @property
    def stop_checkpoint_gb(self) -> float:
        """The checkpoint written after a stop signal (without :attr:`left_out`)."""
        return self.parameters * sum(v for k, v in self.parts.items() if k not in self.left_out) / GB

    @property
    def model_gb(self) -> float:
        return self.parameters * self.model_bytes_per_param / GB

    @property
    def seed_disk_gb(self) -> float | None:
        """Checkpoints kept at most (one more while the newest is written) plus the final model."""
        return None if self.kept is None else self.kept * self.checkpoint_gb + self.model_gb

    def write_s(self, gb: float) -> float:
        return gb / self.write_gbps

    def table(self) -> str:
        """The checkpoint rows of ``olmpipe plan``."""
        per = " + ".join(f"{k} {v:.3g}" for k, v in self.parts.items())
        kept = f"unbounded ({self.section}.{self.knobs_key}.save_total_limit: null)" if self.kept is None else \
            f"{self.kept} x {self.checkpoint_gb:.1f} + model/ {self.model_gb:.1f}"
        rows = [
            ("one checkpoint", f"{self.checkpoint_gb:.1f}", f"{per} B/param ({self.strategy})"),
            ("checkpoint on SIGTERM", f"{self.stop_checkpoint_gb:.1f}",
             f"without the {', '.join(self.left_out)} (a resume does not read it)" if self.left_out else "the same"),
            ("final model/", f"{self.model_gb:.1f}", f"{self.model_bytes_per_param:.3g} B/param"),
            ("disk per seed", "-" if self.seed_disk_gb is None else f"{self.seed_disk_gb:.1f}",
             f"{kept}; {self.seeds} seed(s): "
             + ("-" if self.seed_disk_gb is None else f"{self.seeds * self.seed_disk_gb:.0f} GB")),
        ]
        width = max(len(r[0]) for r in rows)
        lines = [f"{'checkpoints':<{width}}  {'GB':>7}  note"]
        lines += [f"{name:<{width}}  {gb:>7}  {note}" for name, gb, note in rows]
        grace = "n/a (one process: SIGTERM reaches it directly)" if self.stop_grace_s is None \
            else f"{self.stop_grace_s:g} s"
        lead = f"{self.signal[0]} s before the walltime ({self.signal_source})" if self.signal else \
            f"none ({self.signal_source})"
        lines.append(f"write time at {self.write_gbps:g} GB/s (resources.{self.section}.checkpoint_write_gbps): "
                     f"{self.write_s(self.checkpoint_gb):.0f} s, on SIGTERM {self.write_s(self.stop_checkpoint_gb):.0f} s "
                     "(+ the rest of the step in flight)")
        lines.append(f"stop grace (resources.{self.section}.stop_grace_s): {grace}; SLURM signal: {lead}")
        return "\n".join(lines)


def checkpoint_plan(cfg: Mapping[str, Any], *, strategy: str, processes: int, parameters: int, weight_bytes: int,
                    compute_bytes: int, slurm_extra: str | None = None,
                    signal_source: str = "the train rule's slurm_extra",
                    adapter_bytes: float | None = None, kind: JobKind = GRPO) -> CheckpointPlan:
    """The :class:`CheckpointPlan` of ``cfg`` for a model of ``parameters`` under ``strategy``.

    ``slurm_extra``: the train rule's (the profile's ``set-resources``), for SLURM's signal lead;
    None when the job is not sent through SLURM with ``--signal``. ``adapter_bytes``: with LoRA, the
    bytes of what is trained (:mod:`olmpipe.plan.lora`): a checkpoint is then that and its two AdamW
    moments, and ``model/`` the merged float32 model plus the adapter.
    """
    res, grpo = cfg["resources"][kind.section], kind.section_of(cfg)[kind.knobs_key]
    parts = checkpoint_bytes_per_param(strategy, weight_bytes, compute_bytes)
    model_bytes = float(weight_bytes)
    if adapter_bytes is not None:
        parts = {"adapter": adapter_bytes / parameters, "adapter AdamW moments": 2 * adapter_bytes / parameters}
        model_bytes = 4 + adapter_bytes / parameters
    limit = grpo["save_total_limit"]
    max_steps = grpo["max_steps"]
    kept = None
    if limit is not None:
        kept = limit + 1  # transformers/olmpipe delete the oldest only after the newest is written
    elif max_steps > 0:
        kept = math.ceil(max_steps / grpo["save_steps"])
    grace = float(res["stop_grace_s"]) if processes > 1 else None
    result = CheckpointPlan(strategy=strategy, parameters=parameters, parts=parts,
                            left_out=tuple(p for p in resume_only_parts(strategy) if p in parts),
                            model_bytes_per_param=model_bytes, kept=kept,
                            seeds=len(kind.section_of(cfg)["seeds"]), write_gbps=float(res["checkpoint_write_gbps"]),
                            stop_grace_s=grace, signal=signal_lead_s(slurm_extra), signal_source=signal_source,
                            problems=(), section=kind.section, knobs_key=kind.knobs_key)
    return _with_problems(result)


def _with_problems(p: CheckpointPlan) -> CheckpointPlan:
    from dataclasses import replace

    need = p.write_s(p.stop_checkpoint_gb)
    faster = (f"or point {RESULTS}/ at faster storage (and raise resources.{p.section}.checkpoint_write_gbps, "
              f"now {p.write_gbps:g} GB/s)")
    what = (f"writing the checkpoint on SIGTERM ({p.stop_checkpoint_gb:.1f} GB at {p.write_gbps:g} GB/s = "
            f"{need:.0f} s)")
    problems = []
    if p.stop_grace_s is not None and p.stop_grace_s < need:
        problems.append(f"resources.{p.section}.stop_grace_s ({p.stop_grace_s:g} s) is shorter than {what}: the ranks are "
                        f"killed mid-write and the run loses up to save_steps steps; raise stop_grace_s to at least "
                        f"{math.ceil(need)} s plus a step (and the SLURM --signal lead with it) {faster}")
    if p.signal is not None:
        lead, name = p.signal
        if name != "TERM":
            problems.append(f"{p.signal_source} sends SIG{name}, but the trainer checkpoints on SIGTERM: use "
                            f"--signal=TERM@<seconds>")
        elif lead < need:
            problems.append(f"SLURM signals {lead} s before the walltime ({p.signal_source}), less than {what}: "
                            f"raise the --signal=TERM@ lead to at least {math.ceil(need)} s plus a step {faster}")
        elif p.stop_grace_s is not None and p.stop_grace_s > lead:
            problems.append(f"resources.{p.section}.stop_grace_s ({p.stop_grace_s:g} s) is longer than SLURM's signal lead "
                            f"({lead} s, {p.signal_source}): the job is killed at the walltime before the grace "
                            "ends; raise the --signal=TERM@ lead or lower stop_grace_s")
    return replace(p, problems=tuple(problems))

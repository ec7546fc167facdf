"""``GRPOConfig`` from the ``train`` config section: every recipe knob comes from the config.

``train.grpo`` holds GRPOConfig's own keys and is passed through unchanged (the schema owns their
defaults). The few arguments set here are not hyperparameters but consequences of the run:

- ``output_dir``, ``seed`` / ``data_seed``: the job's folder and seed;
- ``bf16`` / ``use_cpu``: from ``train.device`` and ``train.dtype`` (GRPOConfig's ``bf16=True``
  default would make CPU runs ~7x slower); ``bf16`` is mixed precision over float32 weights
  (:mod:`olmpipe.job.precision`);
- ``model_init_kwargs["dtype"]``: the reference model's dtype (the compute dtype, see
  :mod:`olmpipe.job.precision`), unless ``train.grpo.model_init_kwargs`` names one;
- ``report_to``: ``wandb`` unless ``train.wandb.mode`` is ``disabled``;
- ``remove_unused_columns=False``: the dataset columns (test ids, files, pdf, page) must reach the
  rewards;
- ``log_completions=False``: TRL's table crashes with wandb on multimodal prompts (TRL 1.16); the
  run writes its own table (:class:`olmpipe.train.completions.CompletionsTable`);
- ``save_strategy``/``logging_strategy`` = ``steps`` and ``reward_weights`` from ``rewards.weights``;
- ``save_total_limit=None``: olmpipe deletes old checkpoints itself, after the new one is committed
  (:class:`olmpipe.job.callbacks.RunState`, which gets ``train.grpo.save_total_limit``).

>>> from olmpipe.config import load_config
>>> cfg = load_config()
>>> knobs = grpo_knobs(cfg["train"], seed=0)  # once per job: the run settings and vLLM server read them too
>>> args = grpo_config(knobs, output_dir="/tmp/x", seed=0, reward_weights=[1.0], device="cpu")
>>> args.bf16, args.num_generations, args.remove_unused_columns
(False, 4, False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olmpipe.compat.transformers import for_installed
from olmpipe.job.kinds import GRPO
from olmpipe.job.precision import resolve_device, resolve_dtype

__all__ = ["grpo_config", "grpo_knobs", "resolve_device", "resolve_dtype"]


def grpo_knobs(train_cfg: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """``train.grpo`` with the ``seed_overrides`` of ``seed`` applied (:meth:`olmpipe.job.kinds.JobKind.knobs`)."""
    return GRPO.knobs(train_cfg, seed)


def grpo_config(
    knobs: Mapping[str, Any],
    *,
    output_dir: str,
    seed: int,
    reward_weights: list[float],
    device: str,
    dtype: str = "float32",
    report_to: list[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    reference_dtype: str | None = None,
):
    """The ``GRPOConfig`` of one seed's run from its ``knobs`` (:func:`grpo_knobs`, computed once per
    job); ``overrides`` are knobs decided at run time (the address of the job's own vLLM server).

    ``dtype``: the compute dtype (``bfloat16``: mixed precision); ``reference_dtype``: the dtype TRL
    loads the reference model in (None: the policy's, TRL's default).
    """
    from trl import GRPOConfig

    knobs = for_installed({**knobs, **dict(overrides or {})}, GRPOConfig)
    if reference_dtype is not None and knobs.get("beta", 0.0) != 0.0:
        knobs["model_init_kwargs"] = {"dtype": reference_dtype, **dict(knobs.get("model_init_kwargs") or {})}
    knobs["save_total_limit"] = None  # applied after each checkpoint's commit (olmpipe.job.checkpoints.rotate)
    return GRPOConfig(
        output_dir=output_dir,
        seed=seed,
        data_seed=seed,
        bf16=dtype == "bfloat16",
        fp16=False,
        use_cpu=device == "cpu",
        report_to=list(report_to or []),
        remove_unused_columns=False,
        log_completions=False,
        save_strategy="steps",
        logging_strategy="steps",
        reward_weights=list(reward_weights),
        **knobs,
    )

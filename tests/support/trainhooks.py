"""Test-only hooks of a training process, switched on by environment variables.

``tests/lowid_train.py`` (the script the multi-process tests launch) calls :func:`install_from_env`
before it trains; nothing here is imported by ``olmpipe``.

- ``OLMPIPE_TEST_CPU_FSDP=1``: accelerate applies FSDP to CPU (gloo) ranks. accelerate 1.15 sets
  ``DistributedType.FSDP`` only inside the GPU branch of ``AcceleratorState.__init__``
  (``accelerate/state.py`` 986-1015), so on CPUs ``workflow/accelerate/fsdp.yaml`` silently runs as
  DDP. After accelerate's own ``__init__``, a ``MULTI_CPU`` state whose launcher asked for FSDP
  (``ACCELERATE_USE_FSDP=true``) is switched to FSDP with the plugin accelerate built from the
  environment (``accelerator.py`` 382-397), and its mixed precision set as on GPUs. Torch's FSDP2
  (``fully_shard``) itself runs on gloo.
- ``OLMPIPE_TEST_NAN_STEP=k``: at optimizer step ``k`` (1-based) the gradient flowing out of the
  language model's last decoder layer becomes NaN (a tensor hook); the loss stays finite, so only a
  check of the gradients (or of what the optimizer did with them) can see it.
- ``OLMPIPE_TEST_BUCKET_VIEW=0``: DDP without ``gradient_as_bucket_view`` (what transformers and
  accelerate do by default), the control of the runs that compare both.
- ``OLMPIPE_TEST_LOAD_DTYPE=float32``: the policy loaded in that dtype whatever the strategy (the
  float32 load of a DeepSpeed run before olmpipe loaded its bf16 module), the control of the runs
  that compare both.
- ``OLMPIPE_TEST_PROBE=FILE``: one JSON line per event, appended to ``FILE``: ``load`` (the policy
  as :func:`olmpipe.models.load.load_model` returns it: dtype, device, ZeRO-3 partitioned or not),
  ``engine`` (each model as DeepSpeed's engine receives it, ``DeepSpeedEngine._configure_distributed_model``:
  partitioned by ``zero.Init`` or whole, its dtype and local elements) and ``ddp`` (DDP's
  ``gradient_as_bucket_view``).
"""

from __future__ import annotations

import json
import os
from typing import Any


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _record(event: str, **fields: Any) -> None:
    path = os.environ["OLMPIPE_TEST_PROBE"]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": event, "rank": _rank(), **fields}) + "\n")


def _first_param(model: Any) -> Any:
    return next(iter(model.parameters()))


def install_cpu_fsdp() -> None:
    """accelerate applies FSDP to gloo ranks (see the module docstring)."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__

    def init(self, mixed_precision=None, cpu=False, dynamo_plugin=None, deepspeed_plugin=None, fsdp_plugin=None,
             *args, **kwargs):
        original(self, mixed_precision, cpu, dynamo_plugin, deepspeed_plugin, fsdp_plugin, *args, **kwargs)
        if (os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and fsdp_plugin is not None
                and self.distributed_type == DistributedType.MULTI_CPU):
            self.distributed_type = DistributedType.FSDP
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin

    AcceleratorState.__init__ = init


def install_nan_gradient(step: int) -> None:
    """A NaN gradient at optimizer step ``step`` behind the last decoder layer (finite loss)."""
    import torch

    from olmpipe.train.trainer import ResumableGRPOTrainer

    original = ResumableGRPOTrainer.training_step

    def training_step(self, model, inputs, num_items_in_batch=None):
        if not getattr(self, "_test_nan_hooked", False):
            self._test_nan_hooked = True
            names = [n for n, _ in self.accelerator.unwrap_model(model).named_modules()
                     if n.endswith("language_model.layers.1")]
            layer = dict(self.accelerator.unwrap_model(model).named_modules())[names[0]]
            trainer = self

            def forward_hook(module, args, out):
                hidden = out[0] if isinstance(out, tuple) else out
                if trainer.state.global_step + 1 == step and torch.is_grad_enabled() and hidden.requires_grad:
                    hidden.register_hook(lambda grad: grad * float("nan"))

            layer.register_forward_hook(forward_hook)
        return original(self, model, inputs, num_items_in_batch)

    ResumableGRPOTrainer.training_step = training_step


def install_probe() -> None:
    """Record how the policy is loaded and how DeepSpeed and DDP receive the models."""
    import olmpipe.models.load as loads

    original_load = loads.load_model

    def load_model(path, *, dtype=None, device=None, quantization_config=None):
        model = original_load(path, dtype=dtype, device=device, quantization_config=quantization_config)
        param = _first_param(model)
        _record("load", requested_dtype=str(dtype), requested_device=str(device), dtype=str(param.dtype),
                device=str(param.device), partitioned=hasattr(param, "ds_id"))
        return model

    loads.load_model = load_model
    try:
        from deepspeed.runtime.engine import DeepSpeedEngine
    except ImportError:
        DeepSpeedEngine = None
    if DeepSpeedEngine is not None:
        original_configure = DeepSpeedEngine._configure_distributed_model

        def configure(self, model):
            param = _first_param(model)
            _record("engine", model=type(model).__name__, partitioned=hasattr(param, "ds_id"), dtype=str(param.dtype),
                    local_numel=sum(p.numel() for p in model.parameters()),
                    trainable=any(p.requires_grad for p in model.parameters()))
            return original_configure(self, model)

        DeepSpeedEngine._configure_distributed_model = configure
    import torch

    original_ddp = torch.nn.parallel.DistributedDataParallel.__init__

    def ddp_init(self, *args, **kwargs):
        original_ddp(self, *args, **kwargs)
        _record("ddp", gradient_as_bucket_view=bool(self.gradient_as_bucket_view))

    torch.nn.parallel.DistributedDataParallel.__init__ = ddp_init


def install_bucket_view(on: bool) -> None:
    """DDP's ``gradient_as_bucket_view`` set to ``on`` instead of olmpipe's True."""
    from olmpipe.job.trainer import ResumableTrainer

    def configure_ddp(self, ddp_kwargs):
        ddp_kwargs.gradient_as_bucket_view = on

    ResumableTrainer.configure_ddp = configure_ddp


def install_load_dtype(dtype: str) -> None:
    """The policy loaded in ``dtype`` (its device as olmpipe places it)."""
    import olmpipe.job.load as job_load

    original = job_load.load_placement

    def load_placement(setup, strategy):
        return dtype, original(setup, strategy)[1]

    job_load.load_placement = load_placement


def install_from_env() -> None:
    """Install the hooks the environment asks for (see the module docstring)."""
    if os.environ.get("OLMPIPE_TEST_BUCKET_VIEW"):
        install_bucket_view(os.environ["OLMPIPE_TEST_BUCKET_VIEW"] == "1")
    if os.environ.get("OLMPIPE_TEST_LOAD_DTYPE"):
        install_load_dtype(os.environ["OLMPIPE_TEST_LOAD_DTYPE"])
    if os.environ.get("OLMPIPE_TEST_CPU_FSDP") == "1":
        install_cpu_fsdp()
    if os.environ.get("OLMPIPE_TEST_NAN_STEP"):
        install_nan_gradient(int(os.environ["OLMPIPE_TEST_NAN_STEP"]))
    if os.environ.get("OLMPIPE_TEST_PROBE"):
        install_probe()

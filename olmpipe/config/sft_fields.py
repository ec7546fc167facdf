"""Every field of TRL's ``SFTConfig``, checked by name and type when the config is loaded.

``sft.args`` (and each ``sft.seed_overrides[].args``) may set any field of the installed TRL's
``SFTConfig``, as ``train.grpo`` any of ``GRPOConfig``'s (:mod:`olmpipe.config.grpo_fields`, whose
checks these are, with SFTConfig's table ``sft_fields.json`` and the fields olmpipe sets itself).
A test holds the table equal to the installed TRL; regenerate it after a TRL upgrade with
``python -m olmpipe.config.sft_fields --write``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.config.grpo_fields import check_knobs as _check_knobs
from olmpipe.config.grpo_fields import describe_fields as _describe_fields
from olmpipe.layout import SFT_RUN

FIELDS_FILE = Path(__file__).with_name("sft_fields.json")

#: SFTConfig fields olmpipe sets itself, and where the value comes from.
OWNED = {
    "output_dir": f"the run folder ({SFT_RUN})",
    "seed": "sft.seeds", "data_seed": "sft.seeds",
    "bf16": "sft.dtype", "fp16": "sft.dtype", "use_cpu": "sft.device",
    "report_to": "sft.wandb.mode", "run_name": "the seed's run name",
    "remove_unused_columns": "olmpipe (the collator needs the image column)",
    "resume_from_checkpoint": "sft.resume",
    "save_strategy": "sft.args.save_steps", "logging_strategy": "sft.args.logging_steps",
    "dataset_text_field": "olmpipe (prompt-completion pairs)",
    "packing": "olmpipe (image pairs cannot be packed, TRL 1.16 sft_trainer.py:779)",
}


def describe_fields(config_class: Any = None) -> dict[str, list[str]]:
    """``{field name: [JSON types]}`` of ``SFTConfig`` (the installed TRL's by default)."""
    if config_class is None:
        from trl import SFTConfig as config_class
    return _describe_fields(config_class)


def load_fields() -> dict[str, list[str]]:
    return json.loads(FIELDS_FILE.read_text(encoding="utf-8"))


def check_knobs(knobs: Mapping[str, Any], where: str, fields: Mapping[str, list[str]] | None = None) -> list[str]:
    """Problems of ``knobs`` against SFTConfig (see :func:`olmpipe.config.grpo_fields.check_knobs`)."""
    return _check_knobs(knobs, where, load_fields() if fields is None else fields, owned=OWNED,
                        config_name="SFTConfig")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write or check the SFTConfig field table.")
    parser.add_argument("--write", action="store_true", help=f"rewrite {FIELDS_FILE.name} from the installed TRL")
    args = parser.parse_args(argv)
    fields = describe_fields()
    if args.write:
        FIELDS_FILE.write_text(json.dumps(fields, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return 0
    same = fields == load_fields()
    sys.stdout.write("up to date\n" if same else f"{FIELDS_FILE} differs from the installed TRL; run with --write\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

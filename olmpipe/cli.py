"""The ``olmpipe`` command: one subcommand per stage, each delegating to its module's ``main``.

    olmpipe rasterize --help
    olmpipe bench score data/bench/olmocr-sample

Stage modules are imported only when their subcommand runs, so ``olmpipe bench`` never loads
torch and the CPU path never imports vLLM.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module with a ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("olmpipe.bench.cli", "score olmOCR-Bench folders and test files"),
    "rasterize": ("olmpipe.rasterize", "render PDF pages to PNG (stage 1)"),
    "synth": ("olmpipe.synth.cli", "build a synthetic training bench from HTML pages (olmOCR 2 data)"),
    "validate": ("olmpipe.validate.stage", "validate bench tests and build the page index (stage 2)"),
    "difficulty": ("olmpipe.difficulty.cli", "sample and score each train page, drop those without reward spread"),
    "build-model": ("olmpipe.models.tiny", "build the embedded tiny model (Qwen2.5-VL, Qwen3-VL, ...)"),
    "download-model": ("olmpipe.models.hub", "fetch a hub model once into a folder the jobs read offline"),
    "baseline": ("olmpipe.evaluate.baseline", "generate and score with the base model (stage 3)"),
    "train": ("olmpipe.train", "GRPO training with unit-test rewards (stage 4)"),
    "soup": ("olmpipe.train.soup", "average the weights of several seeds"),
    "plan": ("olmpipe.plan.cli", "per-GPU memory plan of the training job (fits or what to change)"),
    "evaluate": ("olmpipe.evaluate.stage", "score the trained model and compare with the baseline (stage 5)"),
    "report": ("olmpipe.report.page", "write the HTML report"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: olmpipe <command> [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        sys.stdout.write(_usage() + "\n")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"olmpipe: unknown command {name!r}\n\n{_usage()}\n")
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())

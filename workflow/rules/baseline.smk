# Stage 3: generate the eval pages with the base model and score them with the bench tests
# (results/baseline/<model name>/). The evaluate stage runs the same code on the trained model.
# See olmpipe/baseline.py.
#
# The generation rules run `python -m olmpipe.baseline` / `olmpipe.evaluate` through `shell:`, not a
# `script:`: vLLM starts its engine core with the `spawn` method, whose child re-imports the main
# module; a Snakemake-generated script would run again there and die (`snakemake` undefined). A
# module with a main guard is safe on every backend (docs/vllm.md).

import json
import os
import sys
from pathlib import Path

from olmpipe.workflow import GENERATE_CODE

# Interpreter of the generation jobs: Snakemake's own, where olmpipe is installed (as for training).
GENERATE_PYTHON = sys.executable

# The config sections a generation job reads, as one JSON argument (olmpipe.baseline --settings).
GENERATE_SETTINGS = json.dumps(
    {k: config[k] for k in ("model", "generation", "baseline")}
)

# The run folder of a generation job: the folder of its scores.json (a params function).
RUN_FOLDER = lambda wildcards, output: str(Path(output.scores).parent)


# Run folder of the base model (same layout as results/evaluate/<model name>/).
BASELINE_RUN = f"results/baseline/{config['model']['name']}"

# The model folder is an input when it is a file path (built or local); a hub id is no file.
MODEL_INPUT = (
    [MODEL_DIR]
    if config["model"]["path"] == "embedded" or os.path.exists(MODEL_DIR)
    else []
)


rule baseline_generate:
    input:
        model=MODEL_INPUT,
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
    output:
        candidate=directory(f"{BASELINE_RUN}/candidate"),
        generations=f"{BASELINE_RUN}/generations.jsonl",
        verdicts=f"{BASELINE_RUN}/verdicts.jsonl",
        scores=f"{BASELINE_RUN}/scores.json",
        scores_csv=f"{BASELINE_RUN}/scores.csv",
        summary=f"{BASELINE_RUN}/summary.json",
    log:
        "logs/baseline/baseline.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: config["resources"]["generate"]["cpus_per_task"]
    resources:
        gpu=config["resources"]["generate"]["gpu"],
        mem_mb=config["resources"]["generate"]["mem_mb"],
        runtime=config["resources"]["generate"]["runtime"],
    params:
        model=config["model"],
        generation=config["generation"],
        baseline=config["baseline"],
        # Editing the generation, prompt, scoring or stage code reruns the job; finished
        # generations are reused from the journal unless olmpipe.generate/prompts changed.
        code=code_version(*GENERATE_CODE),
        # The model folder (an input) or a hub id (no file).
        model_path=lambda wildcards, input: (
            input.model if input.model else config["model"]["path"]
        ),
        out_dir=RUN_FOLDER,
        python=GENERATE_PYTHON,
        settings=GENERATE_SETTINGS,
    shell:
        "{params.python:q} -m olmpipe.baseline --settings {params.settings:q}"
        " --model {params.model_path:q} --pages {input.pages:q} --tests {input.tests:q}"
        " --out {params.out_dir:q} --threads {threads} > {log:q} 2>&1"

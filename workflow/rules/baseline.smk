# Stage 3: generate the eval pages with the base model and score them with the bench tests
# (results/baseline/<model name>/). The evaluate stage runs the same rule on the trained model
# (evaluate_generate, `use rule baseline_generate` in evaluate.smk). See olmpipe/evaluate/engine.py.
#
# The generation rules run `python -m olmpipe.evaluate.baseline` / `olmpipe.evaluate.stage` through `shell:`, not a
# `script:`: vLLM starts its engine core with the `spawn` method, whose child re-imports the main
# module; a Snakemake-generated script would run again there and die (`snakemake` undefined). A
# module with a main guard is safe on every backend (docs/vllm.md).

import json
import sys
from pathlib import Path

from olmpipe.generate.tracked import generation_trigger_json
from olmpipe.layout import baseline_run_dir

# Interpreter of the generation jobs: Snakemake's own, where olmpipe is installed (as for training).
GENERATE_PYTHON = sys.executable

# The config sections a generation job reads, as one JSON argument (olmpipe.evaluate.baseline --settings).
GENERATE_SETTINGS = json.dumps(
    {k: config[k] for k in ("model", "generation", "eval_run")}
)

# What changes the generations: the generation jobs' rerun trigger (docs/reruns.md).
GENERATE_TRIGGER = generation_trigger_json(config)

# The run folder of a generation job: the folder of its scores.json (a params function).
RUN_FOLDER = lambda wildcards, output: str(Path(output.scores).parent)


# Run folder of the base model (same layout as results/evaluate/<model name>/).
BASELINE_RUN = baseline_run_dir(config)


# The one definition of a generate-and-score job; evaluate_generate (evaluate.smk) is this rule
# with the trained model as input, its own run folder, log and entry point.
rule baseline_generate:
    input:
        model=MODEL_INPUT,
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
    output:
        **eval_run_outputs(BASELINE_RUN),
    log:
        "logs/baseline/baseline.log",
    conda:
        conda_env(config["resources"]["generate"]["gpu"])
    threads: config["resources"]["generate"]["cpus_per_task"]
    resources:
        gpu=config["resources"]["generate"]["gpu"],
        mem_mb=config["resources"]["generate"]["mem_mb"],
        runtime=config["resources"]["generate"]["runtime"],
    params:
        # The stage's entry point (module and arguments).
        entry="olmpipe.evaluate.baseline",
        # Both generation rules get exactly these settings and code: changing what they generate
        # (olmpipe.generate.tracked: not batch size, concurrency, timeouts) reruns both stages, so
        # the two runs never differ in settings.
        trigger=GENERATE_TRIGGER,
        # Editing the generation, prompt, scoring or stage code reruns the job; finished
        # generations are reused from the journal unless olmpipe.generate/prompts changed.
        code=rule_code_version("generate"),
        # No hub look-up: the model is a folder (a downloaded hub id included).
        offline=OFFLINE,
        out_dir=RUN_FOLDER,
        python=GENERATE_PYTHON,
        # every section the job reads; a function of `output`, so not a rerun trigger
        settings=lambda wildcards, output: GENERATE_SETTINGS,
    # exec: the job's process is Snakemake's child, and --exit-with-job stops it when Snakemake is gone
    # (kill -9, a closed terminal); the journal keeps every finished generation.
    shell:
        "exec {params.offline} {params.python:q} -m {params.entry} --exit-with-job --settings {params.settings:q}"
        " --model {input.model:q} --pages {input.pages:q} --tests {input.tests:q}"
        " --out {params.out_dir:q} --threads {threads} > {log:q} 2>&1"

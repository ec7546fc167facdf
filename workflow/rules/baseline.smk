# Stage 3: generate the eval pages with the base model and score them with the bench tests
# (results/baseline/<model name>/). The evaluate stage runs the same code on the trained model.
# See olmpipe/baseline.py.

import os

from olmpipe.workflow import GENERATE_CODE

# Run folder of the base model (same layout as results/evaluate/<model name>/).
BASELINE_RUN = f"results/baseline/{config['model']['name']}"

# The model folder is an input when it is a file path (built or local); a hub id is no file.
MODEL_INPUT = [MODEL_DIR] if config["model"]["path"] == "embedded" or os.path.exists(MODEL_DIR) else []

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
    params:
        model=config["model"],
        generation=config["generation"],
        baseline=config["baseline"],
        # Editing the generation, prompt, scoring or stage code reruns the job; finished
        # generations are reused from the journal unless olmpipe.generate/prompts changed.
        code=code_version(*GENERATE_CODE),
    log:
        "logs/baseline/baseline.log",
    threads: config["resources"]["generate"]["cpus_per_task"]
    resources:
        gpu=config["resources"]["generate"]["gpu"],
        mem_mb=config["resources"]["generate"]["mem_mb"],
        runtime=config["resources"]["generate"]["runtime"],
    conda:
        "../envs/olmpipe.yaml"
    script:
        "../scripts/baseline.py"

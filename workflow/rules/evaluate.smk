# Stage 5: generate and score the eval pages with the trained (souped) model through the baseline's
# own code and settings, then compare it with the baseline: olmOCR-Bench aggregation, bootstrap
# intervals, a paired sign-flip test and reward-hacking guards. See olmpipe/evaluate.py.

from olmpipe.evaluate import COMPARE_CODE as EVALUATE_COMPARE_CODE

# Run folder of the trained model: the layout of BASELINE_RUN (baseline.smk; docs/architecture.md).
EVALUATE_RUN = f"results/evaluate/{config['model']['name']}"


rule evaluate_generate:
    input:
        model="results/train/soup/model",
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
    output:
        candidate=directory(f"{EVALUATE_RUN}/candidate"),
        generations=f"{EVALUATE_RUN}/generations.jsonl",
        verdicts=f"{EVALUATE_RUN}/verdicts.jsonl",
        scores=f"{EVALUATE_RUN}/scores.json",
        scores_csv=f"{EVALUATE_RUN}/scores.csv",
        summary=f"{EVALUATE_RUN}/summary.json",
    log:
        "logs/evaluate_generate/evaluate_generate.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: config["resources"]["generate"]["cpus_per_task"]
    resources:
        gpu=config["resources"]["generate"]["gpu"],
        mem_mb=config["resources"]["generate"]["mem_mb"],
        runtime=config["resources"]["generate"]["runtime"],
    params:
        # Exactly the sections (and code, below) the baseline stage generates and scores with:
        # changing any of them reruns both stages, so the two runs never differ in settings.
        model=config["model"],
        generation=config["generation"],
        baseline=config["baseline"],
        code=code_version(*GENERATE_CODE),
        out_dir=RUN_FOLDER,
        python=GENERATE_PYTHON,
        settings=GENERATE_SETTINGS,
    # Through `shell:` like baseline_generate (baseline.smk): vLLM's spawned engine re-imports the
    # main module.
    shell:
        "{params.python:q} -m olmpipe.evaluate --generate-only --settings {params.settings:q}"
        " --model {input.model:q} --pages {input.pages:q} --tests {input.tests:q}"
        " --out {params.out_dir:q} --threads {threads} > {log:q} 2>&1"


rule evaluate_compare:
    input:
        baseline_verdicts=rules.baseline_generate.output.verdicts,
        baseline_generations=rules.baseline_generate.output.generations,
        trained_verdicts=rules.evaluate_generate.output.verdicts,
        trained_generations=rules.evaluate_generate.output.generations,
    output:
        json="results/evaluate/comparison.json",
        csv=report(
            "results/evaluate/comparison.csv",
            caption="../report/comparison.rst",
            category="Comparison",
            labels={"table": "baseline vs trained"},
        ),
    log:
        "logs/evaluate_compare/evaluate_compare.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        model=config["model"],
        evaluate=config["evaluate"],
        code=code_version(*EVALUATE_COMPARE_CODE),
    script:
        "../scripts/evaluate_compare.py"

# Stage 5: generate and score the eval pages with the trained (souped) model through the baseline's
# own code and settings, then compare it with the baseline: olmOCR-Bench aggregation, bootstrap
# intervals, a paired sign-flip test and reward-hacking guards. See olmpipe/evaluate/stage.py.

from olmpipe.layout import evaluate_run_dir

# Run folder of the trained model: the layout of BASELINE_RUN (baseline.smk; docs/architecture.md).
EVALUATE_RUN = evaluate_run_dir(config)


# The baseline's generation job (baseline.smk) on the soup: the same sections, code, resources and
# shell command; only the model, the run folder, the log and the entry point differ.
use rule baseline_generate as evaluate_generate with:
    input:
        model=rules.soup.output.model,
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
    output:
        **eval_run_outputs(EVALUATE_RUN),
    log:
        "logs/evaluate_generate/evaluate_generate.log",
    params:
        entry="olmpipe.evaluate.stage --generate-only",


rule evaluate_compare:
    input:
        baseline_verdicts=rules.baseline_generate.output.verdicts,
        baseline_generations=rules.baseline_generate.output.generations,
        trained_verdicts=rules.evaluate_generate.output.verdicts,
        trained_generations=rules.evaluate_generate.output.generations,
    output:
        json=str(COMPARISON_JSON),
        csv=report(
            str(COMPARISON_CSV),
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
        code=rule_code_version("evaluate_compare"),
    script:
        "../scripts/evaluate_compare.py"

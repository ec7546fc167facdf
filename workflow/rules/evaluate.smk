# Stage 5: generate and score the eval pages with the trained (souped) model through the baseline's
# own code and settings, then compare it with the model GRPO started from: olmOCR-Bench aggregation,
# bootstrap intervals, a paired sign-flip test and reward-hacking guards. See olmpipe/evaluate/stage.py.
# With sft.enabled the chain is base -> SFT -> GRPO: the SFT model gets its own run
# (evaluate_sft_generate), comparison.json compares GRPO with the SFT model it started from, and
# sft_comparison.json the SFT model with the base model (evaluate_sft_compare).

from olmpipe.evaluate.stage import grpo_baseline_name, trained_name
from olmpipe.layout import (
    SFT_COMPARISON_CSV,
    SFT_COMPARISON_JSON,
    evaluate_run_dir,
    sft_eval_run_dir,
    sft_model_name,
)

# Run folder of the trained model: the layout of BASELINE_RUN (baseline.smk; docs/architecture.md).
EVALUATE_RUN = evaluate_run_dir(config)
SFT_ENABLED = config["sft"]["enabled"]


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


# The SFT model's run (sft.enabled), in results/evaluate/<model.name>+sft/.
use rule baseline_generate as evaluate_sft_generate with:
    input:
        model=rules.sft_soup.output.model,
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
    output:
        **eval_run_outputs(sft_eval_run_dir(config)),
    log:
        "logs/evaluate_sft_generate/evaluate_sft_generate.log",
    params:
        entry=f"olmpipe.evaluate.stage --generate-only --name {sft_model_name(config)}",


# The run GRPO is compared with: the model it started from.
GRPO_BASELINE = rules.evaluate_sft_generate if SFT_ENABLED else rules.baseline_generate


rule evaluate_compare:
    input:
        baseline_verdicts=GRPO_BASELINE.output.verdicts,
        baseline_generations=GRPO_BASELINE.output.generations,
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
        model=json.dumps(config["model"]),
        evaluate=json.dumps(config["evaluate"]),
        names=json.dumps(
            {"baseline": grpo_baseline_name(config), "trained": trained_name(config)}
        ),
        code=rule_code_version("evaluate_compare"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job("evaluate_compare", json_params=("model", "evaluate", "names"))


# The SFT model against the base model (sft.enabled).
use rule evaluate_compare as evaluate_sft_compare with:
    input:
        baseline_verdicts=rules.baseline_generate.output.verdicts,
        baseline_generations=rules.baseline_generate.output.generations,
        trained_verdicts=rules.evaluate_sft_generate.output.verdicts,
        trained_generations=rules.evaluate_sft_generate.output.generations,
    output:
        json=str(SFT_COMPARISON_JSON),
        csv=report(
            str(SFT_COMPARISON_CSV),
            caption="../report/comparison.rst",
            category="Comparison",
            labels={"table": "base vs SFT"},
        ),
    log:
        "logs/evaluate_sft_compare/evaluate_sft_compare.log",
    params:
        model=json.dumps(config["model"]),
        evaluate=json.dumps(config["evaluate"]),
        names=json.dumps(
            {"baseline": config["model"]["name"], "trained": sft_model_name(config)}
        ),
        code=rule_code_version("evaluate_compare"),

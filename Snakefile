# olmpipe: GRPO training of a vision-language OCR model with olmOCR-Bench unit tests as rewards.
#
#   snakemake --cores all train        # the whole chain on the embedded default
#   snakemake --cores all validate     # up to a given stage
#
# Targets: `all` (default, the furthest stage) and one per stage: rasterize (pages + manifest),
# validate (validated tests + page index), difficulty (per-page reward spread, filtered page index), ... Stages live in workflow/rules/<stage>.smk, helpers
# in workflow/rules/common.smk; all logic lives in the olmpipe package.
from snakemake.utils import min_version

from olmpipe.config import check_workflow_config

min_version("9.0")


configfile: "config/config.yaml"


check_workflow_config(config)


include: "workflow/rules/common.smk"
include: "workflow/rules/synth.smk"
include: "workflow/rules/rasterize.smk"
include: "workflow/rules/validate.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/baseline.smk"
include: "workflow/rules/sft.smk"
include: "workflow/rules/difficulty.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


rule baseline:
    input:
        rules.baseline_generate.output,


# The difficulty stage on its own (results/difficulty/): the per-page statistics and what the
# filter would drop; training uses the filtered page index with train.difficulty.enabled.
rule difficulty:
    input:
        rules.difficulty_sample.output,
        rules.difficulty_filter.output,


# The SFT model (sft.enabled): every sft seed and their soup (results/sft/soup/model), the model
# GRPO then starts from.
rule sft:
    input:
        rules.sft_soup.output,


# The trained model: every seed, their soup, the soup's evaluation against the baseline (with
# sft.enabled also the SFT model's against the base), and the report (results/report/index.html;
# its job, the last one, prints the comparison table).
rule train:
    input:
        rules.soup.output,
        rules.evaluate_compare.output,
        rules.evaluate_sft_compare.output if config["sft"]["enabled"] else [],
        rules.report_html.output,
        # what trivial answers earn with the rewards trained on (results/validate/audit.*)
        rules.validate_audit.output,


# The trained model's evaluation against the baseline (results/evaluate/comparison.json|csv).
rule evaluate:
    input:
        rules.evaluate_compare.output,


# The HTML report (results/report/index.html) with its plots; needs a trained model.
rule report:
    input:
        rules.report_html.output,


# The default target: the whole chain, as `train`.
rule all:
    default_target: True
    input:
        rules.train.input,

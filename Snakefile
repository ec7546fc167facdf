# olmpipe: GRPO training of a vision-language OCR model with olmOCR-Bench unit tests as rewards.
#
#   snakemake --cores all train        # the whole chain on the embedded default
#   snakemake --cores all validate     # up to a given stage
#
# Stages live in workflow/rules/<stage>.smk; all logic lives in the olmpipe package.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/rasterize.smk"
include: "workflow/rules/validate.smk"


rule all:
    default_target: True
    input:
        rules.validate.output,

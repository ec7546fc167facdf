# Stage 3b (between validate and train): which training pages can GRPO learn from? k completions per
# train page with the model being trained, at the trainer's sampling settings, scored with the
# trainer's rewards (difficulty_sample), and the training page index without the pages whose
# completions all score the same (difficulty_filter). Training reads the filtered index only with
# train.difficulty.enabled; `snakemake difficulty` runs both rules on their own. See
# olmpipe/difficulty/ and docs/difficulty.md.
#
# Reruns: the sampling job when the model, the page index, the tests, the rewards, the sampling
# knobs of train.grpo, train.difficulty.samples/seed or the generation backend change (its params
# hold only those: olmpipe.difficulty.settings.job_config); finished generations are reused from
# its journal, so a reward change only scores again. The thresholds rerun only the filter.

from olmpipe.difficulty.settings import (
    FilterSettings,
    job_config_json,
    job_trigger_json,
    training_batch_pages,
)
from olmpipe.layout import (
    DIFFICULTY_DROPPED,
    DIFFICULTY_FILTER,
    DIFFICULTY_GENERATIONS,
    DIFFICULTY_STATS,
    DIFFICULTY_SUMMARY,
    FILTERED_PAGE_INDEX,
)


# Like the generation rules (baseline.smk) the job runs `python -m olmpipe.difficulty` through
# `shell:`, safe with vLLM's spawned engine process.
rule difficulty_sample:
    input:
        # The model training starts from (with sft.enabled the SFT model).
        model=GRPO_MODEL_INPUT,
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
    output:
        stats=str(DIFFICULTY_STATS),
        summary=str(DIFFICULTY_SUMMARY),
        generations=str(DIFFICULTY_GENERATIONS),
    log:
        "logs/difficulty_sample/difficulty_sample.log",
    conda:
        conda_env(config["resources"]["generate"]["gpu"])
    threads: config["resources"]["generate"]["cpus_per_task"]
    resources:
        gpu=config["resources"]["generate"]["gpu"],
        mem_mb=config["resources"]["generate"]["mem_mb"],
        runtime=config["resources"]["generate"]["runtime"],
    params:
        # The sections the job reads, reduced to what changes its result (a function: evaluated,
        # and k checked against its maximum, only when the stage is part of the run).
        settings=lambda wildcards, output: job_config_json(config),
        # What changes the samples: the rerun trigger (not batch size, timeouts, model.name).
        trigger=lambda wildcards: job_trigger_json(config),
        code=rule_code_version("difficulty_sample"),
        # No hub look-up: the model is a folder (a downloaded hub id included).
        offline=OFFLINE,
        # The run folder: the folder of its statistics (results/difficulty).
        out_dir=lambda wildcards, output: str(Path(output.stats).parent),
        python=GENERATE_PYTHON,
    # exec and --exit-with-job: the sampler stops when its Snakemake is gone (as the generation jobs)
    shell:
        "exec {params.offline} {params.python:q} -m olmpipe.difficulty sample --exit-with-job"
        " --settings {params.settings:q}"
        " --model {input.model:q} --pages {input.pages:q} --tests {input.tests:q}"
        " --out {params.out_dir:q} --threads {threads} > {log:q} 2>&1"


rule difficulty_filter:
    input:
        stats=rules.difficulty_sample.output.stats,
        # the pages the sampling run sampled: the statistics must have each one's line
        summary=rules.difficulty_sample.output.summary,
        pages=rules.validate.output.pages,
    output:
        pages=str(FILTERED_PAGE_INDEX),
        dropped=str(DIFFICULTY_DROPPED),
        summary=str(DIFFICULTY_FILTER),
    log:
        "logs/difficulty_filter/difficulty_filter.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        # min_spread and the pass-rate window (not `enabled`: the filter is the same either way).
        filter=json.dumps(
            FilterSettings.from_config(config["train"]["difficulty"]).to_json()
        ),
        num_generations=config["train"]["grpo"]["num_generations"],
        # Pages one generation batch of training takes: the filter refuses to keep fewer.
        batch_pages=training_batch_pages(config),
        code=rule_code_version("difficulty_filter"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job(
            "difficulty_filter",
            json_params=("filter", "num_generations", "batch_pages"),
        )


# The page index the training jobs read (train.smk): the filtered one with train.difficulty.enabled.
TRAIN_PAGE_INDEX = (
    rules.difficulty_filter.output.pages
    if config["train"]["difficulty"]["enabled"]
    else rules.validate.output.pages
)

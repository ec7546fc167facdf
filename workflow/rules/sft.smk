# The SFT stage (sft.enabled; docs/sft.md): the (page image, answer) pairs of the train split, one
# fine-tuning job per sft seed through the same training job as GRPO (olmpipe/job/, olmpipe/sft/),
# and the soup of their final weights, the model GRPO (train_seed) and the difficulty stage then
# start from. Target `sft` (Snakefile) stops at that model. Its evaluation beside the base model's
# and the GRPO model's is in evaluate.smk.
#
# As for train_seed, only the final model folder (and the copy of the run's metrics) is a Snakemake
# output: the checkpoints beside it survive a failed or preempted job, and a rerun resumes.
from olmpipe.job.jobconfig import seed_config_json, trained_config_json
from olmpipe.job.kinds import SFT
from olmpipe.launch.slurm import slurm_node_resources
from olmpipe.layout import (
    SFT_MODEL_DIR,
    SFT_PAIRS,
    SFT_PAIRS_SUMMARY,
    SFT_RUN,
    sft_run_dir,
)

# What the pairs are made from (not the training knobs: a changed learning rate reruns the jobs,
# not the pairs).
SFT_PAIRS_SETTINGS = {
    k: config["sft"][k]
    for k in ("source", "candidate", "pairs_dir", "front_matter", "max_pages")
}


rule sft_pairs:
    input:
        pages=rules.validate.output.pages,
        pairs_dir=(
            [config["sft"]["pairs_dir"]] if config["sft"]["source"] == "pairs" else []
        ),
    output:
        pairs=str(SFT_PAIRS),
        summary=str(SFT_PAIRS_SUMMARY),
    log:
        "logs/sft_pairs/sft_pairs.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        sft=json.dumps(SFT_PAIRS_SETTINGS),
        code=rule_code_version("sft_pairs"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job("sft_pairs", json_params=("sft",))


rule sft_seed:
    input:
        model=MODEL_INPUT,
        pairs=rules.sft_pairs.output.pairs,
        tests=rules.validate.output.tests,
    output:
        model=directory(final_model_dir(SFT_RUN)),
        metrics=final_metrics(SFT_RUN),
    log:
        "logs/sft_seed/seed{seed}.log",
    conda:
        conda_env(config["resources"]["sft"]["gpu"])
    threads: config["resources"]["sft"]["cpus_per_task"]
    resources:
        **slurm_node_resources(config["resources"]["sft"]["nodes"]),
        gpu=config["resources"]["sft"]["gpu"],
        mem_mb=config["resources"]["sft"]["mem_mb"],
        runtime=config["resources"]["sft"]["runtime"],
    params:
        offline=OFFLINE,
        run_dir=lambda wildcards: sft_run_dir(wildcards.seed),
        # The sections an SFT job reads, reduced to this seed (olmpipe.job.jobconfig): a function of
        # `resources`, so not a rerun trigger (its checkpointing and logging settings rerun nothing).
        config=lambda wildcards, resources: seed_config_json(
            config, int(wildcards.seed), SFT
        ),
        # What changes the weights the job writes: the rerun trigger.
        trained=lambda wildcards: trained_config_json(config, int(wildcards.seed), SFT),
        # `python -m olmpipe.sft` (or accelerate/torchrun/srun), after the memory plan and the
        # resume check of this seed's run folder (common.smk launch_of).
        launch=launch_of(SFT, sft_run_dir, MODEL_DIR),
        code=rule_code_version("sft_seed"),
    shell:
        "exec {params.offline} {params.launch} --seed {wildcards.seed} --model {input.model:q}"
        " --pages {input.pairs:q} --tests-dir {input.tests:q} --run-dir {params.run_dir:q}"
        " --final-dir {output.model:q} --threads {threads} --config-json {params.config:q}"
        " > {log:q} 2>&1"


rule sft_soup:
    input:
        models=expand(rules.sft_seed.output.model, seed=config["sft"]["seeds"]),
    output:
        model=directory(str(SFT_MODEL_DIR)),
    log:
        "logs/sft_soup/sft_soup.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=16000,
        runtime=60,
    params:
        soup=json.dumps(config["soup"]),
        code=rule_code_version("soup"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job("soup", json_params=("soup",))


# The model GRPO and the difficulty stage start from (train.smk, difficulty.smk).
GRPO_MODEL_INPUT = (
    rules.sft_soup.output.model if config["sft"]["enabled"] else MODEL_INPUT
)

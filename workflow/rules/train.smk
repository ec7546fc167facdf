# Stage 4: GRPO training, one job per seed (wildcard `seed`), then the soup of the seeds' final
# weights. See olmpipe/train/ and olmpipe/train/soup.py; targets: `train_seeds`, `soup`, `train` (Snakefile).
#
# Only the final model folder (with the copy of the run's metrics in it) is a Snakemake output:
# checkpoints, metrics.jsonl/csv, completions/ and wandb/ live beside it in results/train/seed{seed}/ and survive a failed or preempted job
# (Snakemake deletes the outputs of failed jobs), so running the job again resumes (`train.resume:
# auto`). A job stopped by SIGTERM checkpoints and exits with code 75.
from olmpipe.job.jobconfig import seed_config_json, trained_config_json
from olmpipe.job.kinds import GRPO
from olmpipe.launch.slurm import slurm_node_resources


wildcard_constraints:
    seed=r"\d+",


rule train_seed:
    input:
        # The base model, or with sft.enabled the SFT model (rule sft_soup).
        model=GRPO_MODEL_INPUT,
        # The validated page index, or the difficulty filter's with train.difficulty.enabled.
        pages=TRAIN_PAGE_INDEX,
        tests=rules.validate.output.tests,
    output:
        model=directory(final_model_dir(TRAIN_RUN)),
        # The run's metrics (report_plots reads them) as a declared output, yet resume-safe: the
        # live results/train/seed{seed}/metrics.jsonl stays undeclared (Snakemake would delete it
        # with a failed job's outputs, and a resumed run continues it); the trainer copies it beside
        # the final model folder once that exists (olmpipe.records.metrics.final_metrics_path). So
        # a failed or preempted job loses only this copy, and a rerun writes it again.
        metrics=final_metrics(TRAIN_RUN),
    log:
        "logs/train_seed/seed{seed}.log",
    conda:
        conda_env(config["resources"]["train"]["gpu"])
    threads: config["resources"]["train"]["cpus_per_task"]
    resources:
        # Several nodes: --nodes/--ntasks and no srun wrapper (the command's own srun starts one
        # launcher per node); nothing for one node.
        **slurm_node_resources(config["resources"]["train"]["nodes"]),
        gpu=config["resources"]["train"]["gpu"],
        mem_mb=config["resources"]["train"]["mem_mb"],
        runtime=config["resources"]["train"]["runtime"],
    params:
        # No hub look-up in any rank, TRL's reference model or the vLLM server: the model is a
        # folder (a downloaded hub id included).
        offline=OFFLINE,
        run_dir=lambda wildcards: TRAIN_RUN.format(seed=wildcards.seed),
        # The sections training reads, reduced to this seed: adding a seed reruns no other seed. A
        # function of `resources`, so not a rerun trigger (olmpipe.job.jobconfig): a changed
        # logging or checkpoint interval reruns nothing and applies the next time the job runs.
        config=lambda wildcards, resources: seed_config_json(
            config, int(wildcards.seed)
        ),
        # What changes the weights the job writes: the rerun trigger (docs/reruns.md).
        trained=lambda wildcards: trained_config_json(config, int(wildcards.seed)),
        # `python -m olmpipe.train`, accelerate/torchrun with one process per training GPU and the
        # accelerate config of resources.train.strategy, or srun with one launcher per node. The
        # memory plan is checked first (olmpipe/plan/memory.py): a job that cannot fit in
        # resources.train.gpu_memory_gb, or whose checkpoint cannot be written within the stop grace
        # or the profile's --signal lead (slurm_extra), stops Snakemake before anything is submitted;
        # so does a seed whose run folder was trained with other settings (train.resume: auto),
        # before Snakemake deletes its model/ (common.smk train_launch).
        launch=launch_of(GRPO, train_run_dir, GRPO_BASE_DIR),
        # Editing the trainer, rewards or prompt code retrains every seed (not the bench engine:
        # see olmpipe/codeversion.py, RULE_CODE).
        code=rule_code_version("train_seed"),
    shell:
        "exec {params.offline} {params.launch} --seed {wildcards.seed} --model {input.model:q}"
        " --pages {input.pages:q} --tests-dir {input.tests:q} --run-dir {params.run_dir:q}"
        " --final-dir {output.model:q} --threads {threads} --config-json {params.config:q}"
        " > {log:q} 2>&1"


rule train_seeds:
    input:
        expand(rules.train_seed.output.model, seed=config["train"]["seeds"]),


rule soup:
    input:
        models=expand(rules.train_seed.output.model, seed=config["train"]["seeds"]),
    output:
        model=directory(str(SOUP_MODEL_DIR)),
    log:
        "logs/soup/soup.log",
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

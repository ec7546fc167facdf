# The base model. The embedded default: a tiny random VLM (model.tiny.architecture) built locally
# (no network), skipped when model.path names a model folder or a hub id.


rule build_model:
    output:
        # results/model/tiny, or results/model/tiny-<architecture> for another architecture
        model=directory(tiny_model_dir(config["model"]["tiny"]["architecture"])),
    log:
        "logs/build_model/build_model.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    params:
        tiny=json.dumps(config["model"]["tiny"]),
        # editing the builder rebuilds the model and reruns every stage that uses it
        code=rule_code_version("build_model"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job("build_model", json_params=("tiny",))


# A hub id (model.path: org/name): fetched once, on the machine that runs Snakemake (a local rule:
# compute nodes may have no internet), into results/model/hub/<org>--<name>/<revision>/; every job
# reads that folder with the hub switched off (olmpipe/models/hub.py). No code version: a change of
# the downloader does not fetch the same revision again or retrain anything.
if HUB_MODEL:

    rule download_model:
        output:
            model=directory(MODEL_DIR),
        log:
            "logs/download_model/download_model.log",
        localrule: True
        conda:
            "../envs/olmpipe.yaml"
        threads: 1
        params:
            repo=HUB_MODEL[0],
            revision=HUB_MODEL[1],
            python=RULE_PYTHON,
            files=job_files,
        shell:
            rule_job("download_model", text_params=("repo", "revision"))

# The embedded default model: a tiny random Qwen2.5-VL built locally (no network).
# Skipped entirely when config["model"]["path"] names a real model folder or hub id.


rule build_model:
    output:
        model=directory("results/model/tiny"),
    log:
        "logs/build_model/build_model.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    params:
        tiny=config["model"]["tiny"],
        # editing the builder rebuilds the model and reruns every stage that uses it
        code=rule_code_version("build_model"),
    script:
        "../scripts/build_model.py"

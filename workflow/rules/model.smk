# The embedded default model: a tiny random Qwen2.5-VL built locally (no network).
# Skipped entirely when config["model"]["path"] names a real model folder or hub id.


rule build_model:
    output:
        model=directory("results/model/tiny"),
    params:
        tiny=config["model"]["tiny"],
    log:
        "logs/build_model/build_model.log",
    threads: 1
    script:
        "../scripts/build_model.py"

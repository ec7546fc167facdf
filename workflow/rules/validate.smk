# Stage 2: validate the bench tests against the rendered PDFs; write the validated tests, the
# report and the page index (results/validate/pages.jsonl) that training and scoring read.
# See olmpipe/validate/stage.py.


rule validate:
    input:
        manifest=rules.rasterize.output.manifest,
        tests=[f for bench in BENCHES for f in bench_test_files(bench.dir)],
    output:
        tests=directory(validate_outputs()["tests"]),
        report=validate_outputs()["report"],
        pages=validate_outputs()["pages"],
    log:
        "logs/validate/validate.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        bench=config["bench"],
        validate=config["validate"],
        # Editing this stage, the split or the test loader (olmpipe.bench.model/normalize) reruns
        # validate; edits to the scorer do not (see config/README.md, "Reruns").
        code=rule_code_version("validate"),
    script:
        "../scripts/validate.py"

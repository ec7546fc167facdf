# Stage 2: validate the bench tests against the rendered PDFs; write the validated tests, the
# report and the page index (results/validate/pages.jsonl) that training and scoring read.
# See olmpipe/validate/stage.py. Rule validate_audit scores trivial answers (empty, one word, the
# front matter alone, ...) on every validated page with the configured rewards, with and without the
# short-answer guard (olmpipe/validate/audit.py).

from olmpipe.job.jobconfig import rewards_trigger_json


rule validate:
    input:
        manifest=rules.rasterize.output.manifest,
        # content stamps of the test files (common.smk validate_tests_input)
        tests=validate_tests_input,
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
        bench=json.dumps(config["bench"]),
        # validate.audit is the audit's own setting: changing it reruns validate_audit only.
        validate=json.dumps(
            {k: v for k, v in config["validate"].items() if k != "audit"}
        ),
        # Editing this stage, the split or the test loader (olmpipe.bench.model/normalize) reruns
        # validate; edits to the scorer do not (see config/README.md, "Reruns").
        code=rule_code_version("validate"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job("validate", json_params=("bench", "validate"))


# What trivial answers earn on each validated page with the rewards as configured, guard off and on:
# results/validate/audit.jsonl (one line per page, answer and guard) and audit.json (the summary);
# its log ends with the table `olmpipe validate` prints. A reward or its code changing reruns it,
# not validate; nothing downstream reads it (the train target asks for it).
rule validate_audit:
    input:
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
    output:
        records=audit_outputs()["records"],
        summary=audit_outputs()["summary"],
    log:
        "logs/validate_audit/validate_audit.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        # the rewards as configured (not a rerun trigger: a function of `output`) and what of them
        # changes the audit (not the scoring workers' processes, timeouts, memory)
        rewards=lambda wildcards, output: json.dumps(config["rewards"]),
        rewards_trigger=rewards_trigger_json(config),
        audit=json.dumps(config["validate"]["audit"]),
        max_completion_length=config["train"]["grpo"]["max_completion_length"],
        code=rule_code_version("validate_audit"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job(
            "validate_audit", json_params=("rewards", "audit", "max_completion_length")
        )

# The report of a training run: plots (PNG) and one self-contained HTML page
# (results/report/index.html). The plots, the comparison table and the page are also tagged for
# `snakemake --report`. See olmpipe/report/plots.py and olmpipe/report/page.py.
# The training metrics of every seed (train_seed's copy in its final model folder, written when the
# seed has finished; see train.smk): they feed the reward plot.
TRAIN_SEED_METRICS = expand(
    rules.train_seed.output.metrics, seed=config["train"]["seeds"]
)
# With sft.enabled: each SFT seed's metrics (the SFT loss plot) and base vs SFT (the chain section).
SFT_SEED_METRICS = (
    expand(rules.sft_seed.output.metrics, seed=config["sft"]["seeds"])
    if config["sft"]["enabled"]
    else []
)
SFT_COMPARISON = (
    rules.evaluate_sft_compare.output.json if config["sft"]["enabled"] else []
)


rule report_plots:
    input:
        comparison=rules.evaluate_compare.output.json,
        metrics=TRAIN_SEED_METRICS,
        sft_metrics=SFT_SEED_METRICS,
    output:
        rewards=report(
            plot_path("rewards"),
            caption="../report/rewards.rst",
            category="Training",
            labels={"figure": "reward per step"},
        ),
        type_rates=report(
            plot_path("type_rates"),
            caption="../report/type_rates.rst",
            category="Comparison",
            labels={"figure": "pass rate per type"},
        ),
        page_change=report(
            plot_path("page_change"),
            caption="../report/page_change.rst",
            category="Comparison",
            labels={"figure": "per-page change"},
        ),
        # the SFT loss per step (sft.enabled)
        sft_loss=(
            report(
                plot_path(SFT_PLOT),
                caption="../report/sft_loss.rst",
                category="Training",
                labels={"figure": "SFT loss per step"},
            )
            if config["sft"]["enabled"]
            else []
        ),
    log:
        "logs/report_plots/report_plots.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        code=rule_code_version("report"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job("report_plots")


rule report_html:
    input:
        comparison=rules.evaluate_compare.output.json,
        plots=rules.report_plots.output,
        pages=rules.validate.output.pages,
        tests=rules.validate.output.tests,
        baseline_generations=rules.baseline_generate.output.generations,
        trained_generations=rules.evaluate_generate.output.generations,
        # The seeds' training metrics (the share of zero-spread groups) and, with
        # train.difficulty.enabled, the difficulty filter's counts.
        metrics=TRAIN_SEED_METRICS,
        sft_comparison=SFT_COMPARISON,
        difficulty=(
            rules.difficulty_filter.output.summary
            if config["train"]["difficulty"]["enabled"]
            else []
        ),
    output:
        html=report(
            str(REPORT_HTML),
            caption="../report/index.rst",
            category="Report",
            labels={"page": "olmpipe report"},
        ),
    log:
        "logs/report_html/report_html.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        report=json.dumps(config["report"]),
        # The whole run configuration is printed in the report: a function of `output`, so not a
        # rerun trigger (olmpipe.generate.tracked): a setting that reruns no job leaves the page as
        # it is, with the configuration of the run that wrote it.
        config=lambda wildcards, output: json.dumps(config),
        code=rule_code_version("report"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job("report_html", json_params=("report", "config"))

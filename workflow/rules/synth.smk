# Synthetic training bench the olmOCR 2 way (docs/synth.md): HTML pages (files, or a VLM's rewrite of
# your PDF pages) -> one-page PDFs in offline headless Chromium -> olmOCR-Bench tests mined from the
# HTML, checked on the reference answer. Target: `snakemake --cores all synth`. With
# synth.enabled, common.smk points bench.dir at results/synth/bench (training) and keeps the real
# bench for evaluation; synth_tests is a checkpoint because its PDFs are known only once it has run.
# Logic: olmpipe/synth/; each rule calls olmpipe.synth.chain.run_stage.
from olmpipe.synth.chain import run_stage, source_files, stage_params

SYNTH = stage_params(config["synth"])
# results/synth/{html,render,bench,report.json} (olmpipe.layout.SynthLayout)
SYNTH_PATHS = SynthLayout()


rule synth_html:
    input:
        # adding or editing a source page reruns the synth stages
        sources=source_files(SYNTH),
    output:
        html=directory(SYNTH_PATHS.html),
    log:
        "logs/synth_html/synth_html.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=600,
    params:
        synth=SYNTH,
        # not an output: Snakemake would delete it before a rerun (see olmpipe/synth/source.py)
        journal=SYNTH_PATHS.html_journal,
        code=rule_code_version("synth_html"),
    run:
        run_stage("html", log[0], params.synth, out=output.html, journal=params.journal)


rule synth_render:
    input:
        html=rules.synth_html.output.html,
    output:
        render=directory(SYNTH_PATHS.render),
    log:
        "logs/synth_render/synth_render.log",
    threads: 1
    resources:
        mem_mb=3000,
        runtime=120,
    params:
        synth={k: SYNTH[k] for k in ("seed", "rotate_share", "render_timeout_s")},
        # text the model cannot read in the raster it trains on is not mined (olmpipe/synth/legible.py)
        longest_side=config["rasterize"]["longest_side"],
        code=rule_code_version("synth_render"),
    run:
        run_stage(
            "render",
            log[0],
            params.synth,
            longest_side=params.longest_side,
            html=input.html,
            out=output.render,
        )


checkpoint synth_tests:
    input:
        html=rules.synth_html.output.html,
        render=rules.synth_render.output.render,
    output:
        bench=directory(SYNTH_PATHS.bench),
        report=SYNTH_PATHS.report,
    log:
        "logs/synth_tests/synth_tests.log",
    threads: 1
    resources:
        mem_mb=3000,
        runtime=60,
    params:
        synth={
            k: SYNTH[k]
            for k in (
                "seed",
                "tests",
                "test_timeout_s",
                "page_timeout_s",
                "page_memory_mb",
            )
        },
        code=rule_code_version("synth_tests"),
    run:
        run_stage(
            "tests",
            log[0],
            params.synth,
            html=input.html,
            render=input.render,
            out=output.bench,
            report=output.report,
        )


# The synthetic bench (results/synth/bench) and its report (results/synth/report.json).
rule synth:
    input:
        rules.synth_tests.output,

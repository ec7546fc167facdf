# Stage 1: render every PDF page to PNG (pypdfium2) and merge the per-PDF manifests. One job
# renders every bench PDF in a pool of `threads` processes and reuses each page folder whose
# manifest.json records the same PDF bytes, longest side and code version, so that adding or
# changing one PDF re-renders only that PDF (one job per PDF paid a Python start and the package
# imports per PDF: benchmarks/rasterize_scale.py). See olmpipe/rasterize.py.
# Target: `snakemake --cores all rasterize`.


rule rasterize:
    input:
        pdfs=rasterize_input,
    output:
        manifest=str(MANIFEST),
    log:
        "logs/rasterize/rasterize.log",
    conda:
        "../envs/olmpipe.yaml"
    # rendering processes; Snakemake lowers this to --cores, a profile's set-threads changes it
    threads: 8
    resources:
        mem_mb=lambda wildcards, threads: 1000 + 500 * threads,
        runtime=120,
    params:
        longest_side=config["rasterize"]["longest_side"],
        on_error=config["rasterize"]["on_error"],
        # [bench folder, page root] of each bench; the job lists their PDFs itself (the same
        # olmpipe.bench.folders.pdf_files as rasterize_input), so a changed PDF list is an input change
        # and `snakemake -n` does not print thousands of paths as a params change.
        benches=json.dumps([[bench.dir, str(bench.pages_root)] for bench in BENCHES]),
        # Editing olmpipe/rasterize.py re-renders every page (see config/README.md, "Reruns").
        code=rule_code_version("rasterize"),
        python=RULE_PYTHON,
        files=job_files,
    shell:
        rule_job(
            "rasterize",
            json_params=("longest_side", "benches"),
            text_params=("on_error", "code"),
        )

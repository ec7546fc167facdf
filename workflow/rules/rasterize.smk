# Stage 1: render every PDF page to PNG (pypdfium2), one job per PDF so that adding or changing
# one PDF re-renders only that PDF; then merge the per-PDF manifests. See olmpipe/rasterize.py.
# Target: `snakemake --cores all rasterize`.


rule rasterize_pdf:
    input:
        pdf=pdf_input,
    output:
        pages=directory("results/rasterize/{pages}/{pdf}"),
    log:
        "logs/rasterize_pdf/{pages}/{pdf}.log",
    conda:
        "../envs/olmpipe.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        longest_side=config["rasterize"]["longest_side"],
        on_error=config["rasterize"]["on_error"],
        bench_dir=lambda wildcards: BENCH_BY_PAGES[wildcards.pages].dir,
        # Editing olmpipe/rasterize.py re-renders every page (see config/README.md, "Reruns").
        code=code_version(*RASTERIZE_CODE),
    script:
        "../scripts/rasterize.py"


rule rasterize:
    input:
        pages=PAGE_DIRS,
    output:
        manifest="results/rasterize/manifest.jsonl",
    log:
        "logs/rasterize/rasterize.log",
    localrule: True
    conda:
        "../envs/olmpipe.yaml"
    params:
        code=code_version(*RASTERIZE_CODE),
    script:
        "../scripts/rasterize_manifest.py"

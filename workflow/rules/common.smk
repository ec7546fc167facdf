# Helpers shared by all rules. The logic lives in olmpipe.workflow (tested like the rest of the
# package); this file only binds it to the validated config.
from olmpipe.workflow import (
    RASTERIZE_CODE,
    VALIDATE_CODE,
    benches,
    code_version,
    model_dir,
    page_dirs,
    bench_test_files,
)

# Bench folders: bench.dir ("main", pages under results/rasterize/pages/) and, when set,
# bench.eval_dir ("eval", pages under results/rasterize/eval-pages/).
BENCHES = benches(config)
BENCH_BY_PAGES = {bench.pages: bench for bench in BENCHES}
# Every rasterize output folder, one per PDF (discovered when the workflow is parsed).
PAGE_DIRS = [d for bench in BENCHES for d in page_dirs(bench)]
# The model the stages load: results/model/tiny when model.path is "embedded".
MODEL_DIR = model_dir(config)


wildcard_constraints:
    pages="pages|eval-pages",
    pdf=r"[^/].*",


def pdf_input(wildcards):
    """The source PDF of one rasterize job."""
    bench = BENCH_BY_PAGES[wildcards.pages]
    return f"{bench.dir}/pdfs/{wildcards.pdf}.pdf"

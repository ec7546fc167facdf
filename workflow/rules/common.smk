# Helpers shared by all rules. The logic lives in the package (tested like the rest of it):
# olmpipe.bench.folders (the bench folders and their files), olmpipe.layout (every result path: the
# rules' outputs come from it) and
# olmpipe.codeversion (which package code reruns which rule:
# `params: code=rule_code_version("<rule>")`); this file only binds them to the validated config.
import functools
import json
import sys

from snakemake.exceptions import WorkflowError

from olmpipe.bench.folders import (
    BenchLayoutError,
    bench_test_files,
    benches,
    pdf_files,
    pdf_path_for,
)
from olmpipe.codeversion import rule_code_version
from olmpipe.records.stamps import write_stamp
from olmpipe.models.hub import offline_prefix
from olmpipe.layout import (
    COMPARISON_CSV,
    COMPARISON_JSON,
    MANIFEST,
    REPORT_HTML,
    SFT_PLOT,
    SOUP_MODEL_DIR,
    SYNTH_BENCH_DIR,
    TINY_MODEL_DIR,
    tiny_model_dir,
    TRAIN_RUN,
    ModelPathError,
    audit_outputs,
    SynthLayout,
    bench_section,
    eval_run_files,
    final_metrics,
    final_model_dir,
    grpo_base_dir,
    hub_model,
    input_stamp,
    model_dir,
    model_input,
    plot_path,
    train_run_dir,
    validate_outputs,
)
from olmpipe.plan import checked_launch_prefix
from olmpipe.job.resume import ResumeMismatchError, check_workflow_resume

# With synth.enabled, bench.dir becomes the synthetic bench (training) and the real bench the eval
# bench (olmpipe.layout.bench_section, which the olmpipe commands apply too); every rule below
# reads this bench section.
config["bench"] = bench_section(config)

# Bench folders: bench.dir ("main", pages under results/rasterize/pages/) and, when set,
# bench.eval_dir ("eval", pages under results/rasterize/eval-pages/).
BENCHES = benches(config)
BENCH_BY_PAGES = {bench.pages: bench for bench in BENCHES}
# The PDFs of each bench, {stem: exact path under pdfs/}, discovered when the workflow is parsed;
# a missing folder or two PDFs that would share a rasterize folder stop here with one clear line.
PDF_FILES = {}
for _bench in BENCHES:
    if _bench.dir == SYNTH_BENCH_DIR:
        # written by the synth_tests checkpoint (see rasterize_input)
        PDF_FILES[_bench.pages] = {}
        continue
    try:
        PDF_FILES[_bench.pages] = pdf_files(_bench.dir)
    except (FileNotFoundError, BenchLayoutError) as exc:
        _key = "bench.dir" if _bench.role == "main" else "bench.eval_dir"
        raise WorkflowError(f"{_key}: {exc}") from None

# The model the stages load: results/model/tiny when model.path is "embedded", the downloaded
# folder results/model/hub/<org>--<name>/<revision> for a hub id (HUB_MODEL: (repo, revision);
# rule download_model), else the local folder.
try:
    HUB_MODEL = hub_model(config)
    MODEL_DIR = model_dir(config)
except ModelPathError as exc:
    raise WorkflowError(str(exc)) from None
# The base model folder as an input of baseline_generate, sft_seed and (without SFT) train_seed.
MODEL_INPUT = model_input(config)
# The model GRPO (train_seed) and the difficulty stage start from: the SFT model with sft.enabled.
GRPO_BASE_DIR = grpo_base_dir(config)
# Prefix of the commands of the jobs that load the model: no hub look-up there (olmpipe.models.hub).
OFFLINE = offline_prefix()


def conda_env(gpus):
    """The conda environment file (used with `snakemake --sdm conda`) of a job given `gpus` GPUs:
    the set of `scripts/setup.sh --gpu` (CUDA torch, vLLM, DeepSpeed) when it has any, else the
    CPU set."""
    return "../envs/olmpipe-gpu.yaml" if gpus > 0 else "../envs/olmpipe.yaml"


def eval_run_outputs(run):
    """The outputs of a generate-and-score run folder (olmpipe.layout.eval_run_files): `run` is
    the baseline's (baseline_generate) or the trained model's run folder (evaluate_generate).
    """
    files = eval_run_files(run)
    return {**files, "candidate": directory(files["candidate"])}


def rasterize_input(wildcards):
    """The input of the rasterize job: for each bench folder, the content stamp of its PDFs
    (olmpipe.records.stamps: a touched, unchanged PDF of any size reruns nothing; a changed, added
    or removed one reruns rasterize, which renders only that PDF again).

    The synthetic bench's PDFs (synth.enabled) are the synth_tests checkpoint's outputs, known once
    it has run, and are inputs themselves (Snakemake tracks the outputs of its own jobs).
    """
    inputs = []
    for bench in BENCHES:
        if bench.dir == SYNTH_BENCH_DIR and config["synth"]["enabled"]:
            files = pdf_files(checkpoints.synth_tests.get().output.bench)
            inputs += [
                pdf_path_for(bench.dir, stem, pdf) for stem, pdf in files.items()
            ]
        else:
            inputs.append(BENCH_STAMPS[bench.pages]["pdfs"])
    return inputs


def bench_stamps(bench):
    """The content stamps (olmpipe.records.stamps) of a source bench's PDFs and test files,
    written now, when the workflow is parsed, if their content changed."""
    pdfs = [
        pdf_path_for(bench.dir, stem, pdf)
        for stem, pdf in PDF_FILES[bench.pages].items()
    ]
    return {
        "pdfs": write_stamp(pdfs, input_stamp(bench.pages, "pdfs")),
        "tests": write_stamp(
            bench_test_files(bench.dir), input_stamp(bench.pages, "tests")
        ),
    }


# The content stamps of the benches read from folders (not the synthetic bench: its files are the
# outputs of a job).
BENCH_STAMPS = {
    bench.pages: bench_stamps(bench)
    for bench in BENCHES
    if bench.dir != SYNTH_BENCH_DIR
}


def validate_tests_input(wildcards):
    """The test files validate reads: each source bench's content stamp of them, the synthetic
    bench's files themselves."""
    inputs = []
    for bench in BENCHES:
        if bench.dir == SYNTH_BENCH_DIR:
            inputs += bench_test_files(bench.dir)
        else:
            inputs.append(BENCH_STAMPS[bench.pages]["tests"])
    return inputs


def launch_of(kind, run_dir, model):
    """The `launch` param function of the training jobs (train_seed for GRPO, sft_seed for SFT), the
    launch prefix of a job (olmpipe.plan.checked_launch_prefix: the memory plan, batch arithmetic and stop
    grace are checked first), once its run folder is known to resume
    (olmpipe.job.resume.check_workflow_resume): with `<section>.resume: auto`, a run folder whose
    last checkpoint or kept final model was trained with other settings stops Snakemake here, while
    the DAG is built, before it deletes the seed's model/ to rerun the job. The job compares again,
    the training set included. `run_dir(seed)` is the seed's run folder, `model` the base it trains.
    """
    return functools.partial(checked_launch, kind, run_dir, model)


def checked_launch(kind, run_dir, model, wildcards, resources):
    """See launch_of."""
    gpus = resources.gpu
    prefix = checked_launch_prefix(
        config, gpus, model, getattr(resources, "slurm_extra", None), kind
    )
    seed = int(wildcards.seed)
    try:
        check_workflow_resume(config, seed, model, gpus, run_dir(seed), kind)
    except ResumeMismatchError as exc:
        raise WorkflowError(f"{kind.rule} (seed {seed}): {exc}") from None
    return prefix


# Interpreter of the file-to-file jobs (olmpipe.rulejobs): Snakemake's own, where olmpipe is
# installed, as for the generation (GENERATE_PYTHON) and training jobs (olmpipe.launch), also under
# --sdm conda.
# Their `shell:` commands quote it: Snakemake's `script:` leaves the interpreter path unquoted
# (snakemake/script/__init__.py, PythonScript.execute_script, lines 587 and 616-618 in Snakemake
# 9.27: `py_exec = sys.executable`, then "{py_exec} {fname:q}"), which fails (exit 127) in a
# checkout whose .venv path holds a space (snakemake issue #2645).
RULE_PYTHON = sys.executable


def job_files(wildcards, input, output, threads):
    """The `files` param function of the olmpipe.rulejobs jobs: the rule's named inputs and outputs
    and its threads, as the JSON argument --files."""
    return json.dumps(
        {
            "input": dict(input.items()),
            "output": dict(output.items()),
            "threads": threads,
        }
    )


def rule_job(job, json_params=(), text_params=()):
    """The `shell:` command of a file-to-file rule: `python -m olmpipe.rulejobs <job>` with the
    rule's files (params.files, job_files), the params named in `json_params` (JSON text) and
    `text_params` (plain strings), every path quoted. As the scripts it replaces, the job logs to the
    rule's log and sends any error that ends it there with its traceback (olmpipe.rulejob), then
    ends with one line naming the rule and the log on Snakemake's standard error; its standard
    output (the tables the audit and the report print) is Snakemake's."""
    args = "".join(f" --param {name} {{params.{name}:q}}" for name in json_params)
    args += "".join(f" --text {name} {{params.{name}:q}}" for name in text_params)
    return (
        f"{{params.python:q}} -m olmpipe.rulejobs {job} --log {{log:q}}"
        f" --files {{params.files:q}}{args}"
    )

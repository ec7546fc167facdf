"""The one home of olmpipe's use of TRL, transformers, accelerate and vLLM internals.

Where only a private method or attribute of an upstream library will do, it is used here and
nowhere else (``tests/test_compat.py`` scans the package and fails on a private upstream name
outside this folder), with the upstream file and line it mirrors and the releases it was checked
against. One module per library:

- :mod:`.trl`: TRL's ``GRPOTrainer`` (private overrides as public hooks, the epoch-seeded
  ``RepeatSampler``, the record of the latest batch, the vLLM weight sync);
- :mod:`.transformers`: transformers' models (tied weights);
- :mod:`.vllm`: vLLM's CPU linear layers and encoder cache (colocated rollouts);
- :mod:`.versions`: the tested releases (:data:`~.versions.TESTED`, the pins of ``pyproject.toml``)
  and :func:`~.versions.require`, which every seam module calls on import and the trainer at start.

Importing a seam module imports its library; the workflow (``snakemake -n``) imports none of them.
"""

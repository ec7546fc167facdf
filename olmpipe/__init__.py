"""olmpipe: GRPO training of vision-language OCR models with olmOCR-Bench unit tests as rewards.

The package holds all logic; the Snakemake workflow (``Snakefile``, ``workflow/``) only wires
stages together. Every stage is runnable on its own: ``olmpipe <stage> --help`` or
``python -m olmpipe.<stage> --help``.
"""

__version__ = "0.1.0"

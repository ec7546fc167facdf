"""olmpipe: GRPO training of vision-language OCR models with olmOCR-Bench unit tests as rewards.

The package holds all logic; the Snakemake workflow (``Snakefile``, ``workflow/``) only wires
stages together. Every stage is runnable on its own: ``olmpipe <stage> --help`` or
``python -m olmpipe.<stage> --help``. ``docs/architecture.md`` draws the packages: one per stage,
over the shared layers they use.
"""

from olmpipe.moved import install as _install_moved_names

__version__ = "0.2.0"

# the module names of release 0.1 keep working for one release (olmpipe.moved)
_install_moved_names()

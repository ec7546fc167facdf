"""Stage 2, validate: the bench's tests checked against its PDFs and pages, and the page index
(train/eval split) every later stage reads.

    python -m olmpipe.validate --config config/config.yaml

- :mod:`~olmpipe.validate.stage`: the checks and the page index;
- :mod:`~olmpipe.validate.result`: each problem found and the stage's result;
- :mod:`~olmpipe.validate.outputs`: the outputs (validated tests, report, page index), all or nothing;
- :mod:`~olmpipe.validate.split`: the seeded train/eval split of a bench's PDFs (whole documents).

The names of the former ``olmpipe/validate.py`` are imported from here lazily.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "LONG_TEXT_CHARS": "olmpipe.validate.stage",
    "long_text_warnings": "olmpipe.validate.stage",
    "ValidationFailed": "olmpipe.validate.result",
    "Problem": "olmpipe.validate.result",
    "ValidationResult": "olmpipe.validate.result",
    "check_pdf_field": "olmpipe.validate.stage",
    "default_math_checker": "olmpipe.validate.stage",
    "validate_benches": "olmpipe.validate.stage",
    "OutputError": "olmpipe.validate.outputs",
    "write_outputs": "olmpipe.validate.outputs",
    "summary": "olmpipe.validate.stage",
    "run_validate": "olmpipe.validate.stage",
    "main": "olmpipe.validate.stage",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'olmpipe.validate' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

"""The report: one self-contained HTML page that answers "did it get better, where, is it real?".

    python -m olmpipe.report --config config/config.yaml

- :mod:`~olmpipe.report.plots`: reward curves, per-type pass rates, per-page change (PNG);
- :mod:`~olmpipe.report.page`: the page (config, versions) from :mod:`~olmpipe.report.sections` (headline, chain, tables, guards, generation, difficulty) and :mod:`~olmpipe.report.samples` (sample pages);
- :mod:`~olmpipe.report.template`: its template.

The names of the former ``olmpipe/report.py`` are imported from here lazily.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ReportSettings": "olmpipe.report.page",
    "software_versions": "olmpipe.report.page",
    "select_pages": "olmpipe.report.samples",
    "embed_png": "olmpipe.report.samples",
    "headline": "olmpipe.report.sections",
    "build_report": "olmpipe.report.page",
    "write_report": "olmpipe.report.page",
    "main": "olmpipe.report.page",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'olmpipe.report' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

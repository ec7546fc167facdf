"""The files of the synthetic bench stages (folders: :class:`olmpipe.layout.SynthLayout`).

- ``index.jsonl`` in ``results/synth/html`` and ``render``: one JSON line per page
  (``synth_html``: name, source, page size, status, reason; ``synth_render``: name, PDF, rotation,
  status, reason), written by the stage and read by the next one
  (:class:`olmpipe.synth.source.HtmlEntry`, :class:`olmpipe.synth.bench.RenderEntry`);
- the synthetic bench (``results/synth/bench``) is an olmOCR-Bench folder: its tests in
  ``synth.jsonl`` and the reference answers in the candidate folder ``reference/``.
"""

from __future__ import annotations

INDEX_NAME = "index.jsonl"
#: The synthetic bench's test file and its candidate folder of reference answers.
TESTS_NAME = "synth.jsonl"
REFERENCE_DIR = "reference"

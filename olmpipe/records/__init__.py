"""The files that pass between stages, each with one owner module that reads and writes it.

============================  ==========================================  =====================
file                          written by -> read by                       owner
============================  ==========================================  =====================
``validate/pages.jsonl``      validate -> generation, training, report    :mod:`.pages`
``validate/audit.jsonl|json`` validate_audit -> console, notebooks        :mod:`.audit`
``<run>/generations.jsonl``   baseline/evaluate -> compare, report         :mod:`.generations`
``<run>/verdicts.jsonl``      baseline/evaluate -> compare, notebooks      :mod:`.verdicts`
``difficulty/*.jsonl|json``   difficulty -> training, report, notebooks    :mod:`.difficulty`
``train/seed<n>/metrics.*``   training -> report plots, notebooks          :mod:`.metrics`
``train/seed<n>/completions`` training -> notebooks                        :mod:`.completions`
``evaluate/comparison.*``     evaluate -> report, plots, notebooks         :mod:`.comparison`
============================  ==========================================  =====================

Every owner writes through :mod:`.files` (one ``atomic_write``, JSON Lines with ``<file>:<line>``
errors, one ``file_sha256``); :mod:`.text` holds the one completion-to-text reduction. The
rasterize manifest and the validated test files are owned by :mod:`olmpipe.rasterize` and
:mod:`olmpipe.bench.model`. Notebooks load all of it as DataFrames with :mod:`olmpipe.results`.
This package imports nothing heavy (no torch, transformers or pandas).
"""

"""Helpers for olmpipe's tests that are worth reusing: hand-made scored runs (``runs``), a
throw-away local SLURM cluster (``slurm``, also a script: ``python tests/support/slurm.py up|down``),
a local HTTP server (``localhttp``) and the skip marks of the browser tests (``browser``).

They live beside the tests, not in the installed package; tests import them as ``support.runs`` and
``support.slurm`` (pytest puts ``tests/`` on ``sys.path``).
"""

"""Helpers for olmpipe's tests that are worth reusing: hand-made scored runs (``runs``), a
throw-away local SLURM cluster (``slurm``, also a script: ``python tests/support/slurm.py up|down``),
a local HTTP server (``localhttp``), the skip marks of the browser tests (``browser``), a
command runner that lists the processes a run leaves behind (``leftovers``), a step gate that
holds a trainer in another process after a given step until the test releases it (``gate``, with
``stepgate/sitecustomize.py`` put on the child's ``PYTHONPATH``) and a real rendered page with its
image tokens under a real processor (``pages``).

They live beside the tests, not in the installed package; tests import them as ``support.runs`` and
``support.slurm`` (pytest puts ``tests/`` on ``sys.path``).
"""

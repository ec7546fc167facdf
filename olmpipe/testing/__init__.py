"""Helpers for olmpipe's tests that are worth reusing: hand-made scored runs (``runs``) and a
throw-away local SLURM cluster (``slurm``)."""

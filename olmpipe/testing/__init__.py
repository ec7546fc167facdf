"""Helpers for testing olmpipe against real infrastructure (a throw-away local SLURM cluster)."""

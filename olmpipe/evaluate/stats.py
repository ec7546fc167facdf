"""Resampling statistics for comparing two scored runs on the same unit tests.

Two questions are answered for every score of the comparison (overall, per test type, per JSONL
category): how sure are we of each run's score (a bootstrap confidence interval), and is the
difference between the runs real (a paired test on per-test outcomes).

Both are deterministic for a given seed, so every number in a report can be reproduced by hand:

- :func:`paired_bootstrap` resamples tests with replacement, *within each stratum* (olmOCR-Bench
  resamples within each JSONL category because the overall score is a mean of category scores).
  The same resampled indices are applied to both runs, which gives an interval for the difference
  that accounts for the pairing. The draws are, in this order, for each stratum in the order given:
  ``rng.integers(0, n_stratum, size=(samples, n_stratum))`` with ``rng = np.random.default_rng(seed)``.
- :func:`sign_flip_test` is the paired permutation test: under "no difference", the baseline and
  trained labels of each test are exchangeable, so every per-test difference ``d_i`` may flip its
  sign. The p-value is the share of sign assignments whose weighted sum is at least as far from 0
  as the observed one. With few changed tests it enumerates all ``2**m`` assignments (exact);
  otherwise it draws ``rng.choice([-1, 1], size=(permutations, m))`` and reports
  ``(1 + hits) / (1 + permutations)``.

Example (one category of four tests, three gained and one lost)::

    >>> sign_flip_test([1, 1, 1, -1], [0.25] * 4, exact_max=16, permutations=0, seed=0).p_value
    0.625
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Relative tolerance when comparing a resampled statistic with the observed one, so that sums of
# the same weights in another order count as equal.
_TIE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval (``low`` <= ``high``) at ``level`` (e.g. 0.95)."""

    low: float
    high: float
    level: float

    def as_list(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class BootstrapResult:
    """Percentile intervals for the baseline score, the trained score and their difference."""

    baseline: Interval
    trained: Interval
    difference: Interval
    samples: int


@dataclass(frozen=True)
class PairedTestResult:
    """Outcome of a paired sign-flip test.

    ``statistic`` is the observed weighted sum of differences (trained - baseline), ``changed`` the
    number of tests whose outcome differs, ``method`` is ``exact`` (all ``2**changed`` sign
    assignments), ``monte-carlo`` (``permutations`` random ones) or ``none`` (no changed test:
    p = 1).
    """

    statistic: float
    p_value: float
    method: str
    changed: int
    permutations: int


def stratified_score(values: np.ndarray, strata: Sequence[np.ndarray]) -> float:
    """Mean over strata of the mean of ``values`` within each stratum (olmOCR-Bench's overall)."""
    return float(np.mean([values[idx].mean() for idx in strata]))


def _percentile_interval(replicates: np.ndarray, level: float) -> Interval:
    alpha = (1.0 - level) / 2.0
    low, high = np.percentile(replicates, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return Interval(float(low), float(high), level)


def paired_bootstrap(
    baseline: Sequence[float],
    trained: Sequence[float],
    strata: Sequence[Sequence[int]] | None,
    samples: int,
    level: float,
    seed: int,
) -> BootstrapResult:
    """Bootstrap percentile intervals for two paired per-test score vectors.

    ``strata`` lists, for each stratum, the indices of its tests (``None``: one stratum of all
    tests); each replicate's score is the mean over strata of the resampled stratum means. Empty
    strata are ignored. The same indices resample both runs, so the difference interval is paired.
    """
    b = np.asarray(baseline, dtype=float)
    t = np.asarray(trained, dtype=float)
    if b.shape != t.shape or b.ndim != 1:
        raise ValueError(f"paired vectors must have the same length, got {b.shape} and {t.shape}")
    if samples < 1:
        raise ValueError(f"bootstrap samples must be >= 1, got {samples}")
    groups = [np.arange(len(b))] if strata is None else [np.asarray(s, dtype=int) for s in strata]
    groups = [g for g in groups if len(g)]
    if not groups:
        raise ValueError("cannot bootstrap an empty set of tests")
    rng = np.random.default_rng(seed)
    b_means = np.zeros(samples)
    t_means = np.zeros(samples)
    for group in groups:
        draws = group[rng.integers(0, len(group), size=(samples, len(group)))]
        b_means += b[draws].mean(axis=1)
        t_means += t[draws].mean(axis=1)
    b_means /= len(groups)
    t_means /= len(groups)
    return BootstrapResult(
        baseline=_percentile_interval(b_means, level),
        trained=_percentile_interval(t_means, level),
        difference=_percentile_interval(t_means - b_means, level),
        samples=samples,
    )


def _count_extreme(signs: np.ndarray, terms: np.ndarray, observed: float) -> int:
    sums = np.abs(signs @ terms)
    return int(np.count_nonzero(sums >= abs(observed) - _TIE_TOLERANCE * max(1.0, abs(observed))))


def sign_flip_test(
    differences: Sequence[float],
    weights: Sequence[float],
    exact_max: int,
    permutations: int,
    seed: int,
) -> PairedTestResult:
    """Two-sided paired sign-flip test of ``sum(weights * differences) == 0``.

    ``differences`` are per-test trained - baseline outcomes, ``weights`` each test's weight in
    the score (``1 / n`` for a plain share, ``1 / (k * n_category)`` for olmOCR-Bench's overall).
    Exact when at most ``exact_max`` differences are non-zero, else Monte Carlo with ``seed``.
    """
    d = np.asarray(differences, dtype=float)
    w = np.asarray(weights, dtype=float)
    if d.shape != w.shape:
        raise ValueError(f"differences and weights differ in length: {d.shape} vs {w.shape}")
    terms = (d * w)[d != 0]
    observed = float(np.sum(d * w))
    m = len(terms)
    if m == 0:
        return PairedTestResult(observed, 1.0, "none", 0, 0)
    if m <= exact_max:
        # every sign assignment: bit j of row r decides the sign of term j
        rows = np.arange(2**m, dtype=np.int64)[:, None]
        signs = 1 - 2 * ((rows >> np.arange(m)) & 1)
        hits = _count_extreme(signs.astype(float), terms, observed)
        return PairedTestResult(observed, hits / 2**m, "exact", m, 2**m)
    if permutations < 1:
        raise ValueError(f"{m} changed tests exceed exact_max={exact_max}; permutations must be >= 1")
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, min(permutations, 2_000_000 // m))
    done = 0
    while done < permutations:
        size = min(chunk, permutations - done)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, m))
        hits += _count_extreme(signs, terms, observed)
        done += size
    return PairedTestResult(observed, (1 + hits) / (1 + permutations), "monte-carlo", m, permutations)

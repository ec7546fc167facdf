"""Tests of olmpipe.evaluate.stats: the paired bootstrap and the sign-flip test, against hand computations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from olmpipe.evaluate.stats import paired_bootstrap, sign_flip_test, stratified_score


def test_stratified_score_is_a_mean_of_stratum_means():
    values = np.array([1, 0, 0, 0, 1, 1.0])
    assert stratified_score(values, [np.arange(4), np.arange(4, 6)]) == pytest.approx((0.25 + 1) / 2)


def test_exact_sign_flip_matches_enumeration():
    d = [1, 1, -1, 0, 1]
    w = [0.1, 0.2, 0.3, 0.4, 0.15]
    res = sign_flip_test(d, w, exact_max=16, permutations=0, seed=0)
    terms = [di * wi for di, wi in zip(d, w) if di]
    obs = abs(sum(terms))
    hits = sum(abs(sum(s * t for s, t in zip(signs, terms))) >= obs - 1e-12
               for signs in itertools.product((1, -1), repeat=len(terms)))  # fmt: skip
    assert (res.method, res.changed, res.permutations) == ("exact", 4, 16)
    assert res.statistic == pytest.approx(0.1 + 0.2 - 0.3 + 0.15)
    assert res.p_value == pytest.approx(hits / 16)


def test_sign_flip_small_cases_by_hand():
    # one gain among equal weights: both signs reach |1|: p = 1
    assert sign_flip_test([1, 0, 0], [1 / 3] * 3, 16, 0, 0).p_value == 1.0
    # five gains, equal weights: only all-plus and all-minus reach |5|: p = 2/32
    assert sign_flip_test([1] * 5, [0.2] * 5, 16, 0, 0).p_value == pytest.approx(2 / 32)
    # three gains one loss (module docstring): |S| >= 2 for 10 of 16 sign assignments
    assert sign_flip_test([1, 1, 1, -1], [0.25] * 4, 16, 0, 0).p_value == pytest.approx(10 / 16)
    none = sign_flip_test([0, 0], [0.5, 0.5], 16, 0, 0)
    assert (none.p_value, none.method, none.changed) == (1.0, "none", 0)


def test_monte_carlo_is_seeded_and_close_to_exact():
    d = [1] * 12 + [-1] * 3
    w = [1 / 15] * 15
    exact = sign_flip_test(d, w, 16, 0, 0).p_value
    a = sign_flip_test(d, w, exact_max=4, permutations=4000, seed=1)
    b = sign_flip_test(d, w, exact_max=4, permutations=4000, seed=1)
    assert a == b and a.method == "monte-carlo" and a.permutations == 4000
    assert a.p_value == pytest.approx(exact, abs=0.01)
    assert a.p_value >= 1 / 4001  # never exactly 0
    with pytest.raises(ValueError, match="permutations must be >= 1"):
        sign_flip_test(d, w, exact_max=4, permutations=0, seed=0)


def test_paired_bootstrap_matches_a_plain_loop():
    b = np.array([1, 0, 1, 0, 0, 1.0])
    t = np.array([1, 1, 1, 0, 1, 1.0])
    strata = [[0, 1, 2, 3], [4, 5]]
    res = paired_bootstrap(b, t, strata, samples=200, level=0.9, seed=5)
    rng = np.random.default_rng(5)
    draws = [rng.integers(0, len(s), size=(200, len(s))) for s in strata]
    b_reps, t_reps = [], []
    for k in range(200):
        b_means = [np.mean([b[strata[s][i]] for i in draws[s][k]]) for s in range(2)]
        t_means = [np.mean([t[strata[s][i]] for i in draws[s][k]]) for s in range(2)]
        b_reps.append(np.mean(b_means))
        t_reps.append(np.mean(t_means))
    diff = np.array(t_reps) - np.array(b_reps)
    assert res.baseline.as_list() == pytest.approx(list(np.percentile(b_reps, [5, 95])))
    assert res.trained.as_list() == pytest.approx(list(np.percentile(t_reps, [5, 95])))
    assert res.difference.as_list() == pytest.approx(list(np.percentile(diff, [5, 95])))
    assert res.difference.level == 0.9 and res.samples == 200


def test_paired_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap([1, 0], [1], None, 10, 0.95, 0)
    with pytest.raises(ValueError, match="empty"):
        paired_bootstrap([], [], None, 10, 0.95, 0)
    with pytest.raises(ValueError, match="samples must be >= 1"):
        paired_bootstrap([1], [1], None, 0, 0.95, 0)
    with pytest.raises(ValueError, match="differ in length"):
        sign_flip_test([1], [1, 2], 16, 10, 0)

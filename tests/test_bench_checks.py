"""olmpipe.bench.checks speed-ups that must not change a verdict, checked against the plain formula."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz

from olmpipe.bench.checks import _partial_ratio


def _agrees(query: str, content: str, max_diffs: int) -> None:
    threshold = 1.0 - (max_diffs / (len(query) if len(query) > 0 else 1))
    exact = fuzz.partial_ratio(query, content) / 100.0
    fast = _partial_ratio(query, content, threshold)
    assert (fast >= threshold) == (exact >= threshold), (query, content, max_diffs, exact, fast)
    if exact >= threshold:
        assert fast == exact or (fast == 1.0 and query in content)


def test_partial_ratio_with_cutoff_on_seeded_random_strings():
    rng = random.Random(11)
    for _ in range(4000):
        alphabet = rng.choice(["ab", "abc ", "abcdefgh ", "the quick brown fox"])
        query = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 90)))
        content = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 300)))
        if rng.random() < 0.5:  # plant a near copy
            at = rng.randrange(len(content) + 1)
            copy = list(query)
            for _ in range(rng.randrange(0, 6)):
                copy[rng.randrange(len(copy))] = rng.choice(alphabet)
            content = content[:at] + "".join(copy) + content[at:]
        _agrees(query, content, rng.randrange(0, max(1, len(query))))


@settings(max_examples=300, deadline=None)
@given(st.text("abc -", min_size=1, max_size=80), st.text("abc -", max_size=200), st.integers(0, 20))
def test_partial_ratio_with_cutoff_hypothesis(query, content, max_diffs):
    _agrees(query, content, max_diffs)

"""Differential tests: olmpipe.bench.nearmatch against fuzzysearch on the whole text.

fuzzysearch picks one best match per group of overlapping matches; when several share the best
(distance, length) its choice follows set order (the string hash seed), so a start is accepted
when it is one of the tied best starts of that group; everything else must be equal.
"""

import random

from fuzzysearch import find_near_matches
from fuzzysearch.common import group_matches
from fuzzysearch.levenshtein import find_near_matches_levenshtein
from hypothesis import given, settings
from hypothesis import strategies as st

from olmpipe.bench.nearmatch import all_starts, first_start, last_start, order_failure


def _acceptable_starts(pattern: str, text: str, k: int) -> list[set[int]]:
    """Per group of fuzzysearch's raw matches (left to right): the starts it may report."""
    if k == 0:
        return [{m.start} for m in find_near_matches(pattern, text, max_l_dist=0)]
    groups = group_matches(list(find_near_matches_levenshtein(pattern, text, k)))
    out = []
    for group in sorted(groups, key=lambda g: min(m.start for m in g)):
        best = min((m.dist, -(m.end - m.start)) for m in group)
        out.append({m.start for m in group if (m.dist, -(m.end - m.start)) == best})
    return out


def _check(pattern: str, text: str, k: int) -> None:
    groups = _acceptable_starts(pattern, text, k)
    reference = [m.start for m in find_near_matches(pattern, text, max_l_dist=k)]
    assert len(reference) == len(groups)
    ours = all_starts(pattern, text, k)
    assert len(ours) == len(groups), (pattern, text, k, ours, reference)
    for start, allowed in zip(ours, groups, strict=True):
        assert start in allowed, (pattern, text, k, ours, reference)
    first, last = first_start(pattern, text, k), last_start(pattern, text, k)
    if not groups:
        assert first is None and last is None
    else:
        assert first in groups[0] and last in groups[-1], (pattern, text, k, first, last, reference)


def _mutate(rng: random.Random, s: str, alphabet: str, edits: int) -> str:
    chars = list(s)
    for _ in range(edits):
        op = rng.randrange(3)
        pos = rng.randrange(len(chars) + 1)
        if op == 0 and chars:
            del chars[min(pos, len(chars) - 1)]
        elif op == 1:
            chars.insert(pos, rng.choice(alphabet))
        elif chars:
            chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
    return "".join(chars)


def test_seeded_random_texts_with_planted_near_copies():
    rng = random.Random(20261130)
    for trial in range(2000):
        alphabet = rng.choice(["ab", "abc", "abcd ", "abcdefghij "])
        k = rng.randrange(0, 5)
        m = rng.randrange(max(1, 3 * (k + 1) - 2), 40)
        pattern = "".join(rng.choice(alphabet) for _ in range(m))
        parts = []
        for _ in range(rng.randrange(0, 6)):
            parts.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30))))
            parts.append(_mutate(rng, pattern, alphabet, rng.randrange(0, k + 3)))
        parts.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30))))
        _check(pattern, "".join(parts), k)


def test_edges_of_the_text_and_repeats():
    for text in ["", "x", "abcabcabcabc", "aaaaaaaaaaaa", "abcabdabcab", "zzzabcdefzzz", "abcdef"]:
        for pattern in ["abcdef", "aaaa", "abcabc", "bcab", "abcdefgh", "aaaaaaaaaaaaaa"]:
            for k in range(len(pattern) // 2 + 1):
                _check(pattern, text, k)


@settings(max_examples=400, deadline=None)
@given(st.text("abc -", min_size=1, max_size=30), st.text("abc -", max_size=120), st.integers(0, 4))
def test_hypothesis_small_alphabet(pattern, text, k):
    k = min(k, len(pattern) // 2)
    _check(pattern, text, k)


def test_results_are_cached_per_window_and_stay_equal():
    text = "lorem ipsum " * 20 + "the quikc brown fox jumps" + " dolor" * 30
    first = first_start("the quick brown fox", text, 2)
    assert first == first_start("the quick brown fox", text, 2) == text.index("the quikc")
    assert last_start("the quick brown fox", "x" * 50, 2) is None


def _check_order(before: str, after: str, text: str, k: int) -> None:
    """order_failure equals the reference's formula for every tie-break fuzzysearch may take."""
    b_groups, a_groups = _acceptable_starts(before, text, k), _acceptable_starts(after, text, k)
    got = order_failure(before, after, text, k)
    if not b_groups:  # "after" when that is known without searching the 'before' clusters
        assert got == "before" or (got == "after" and not a_groups), (before, after, text, k, got)
    elif not a_groups:
        assert got == "after", (before, after, text, k, got)
    else:
        outcomes = {b < a for b in b_groups[0] for a in a_groups[-1]}
        assert (got is None) in outcomes and (got in (None, "order")), (before, after, text, k, got)


def test_order_failure_dense_cases():
    # a 'before' match starting at its window's left edge, right at the last 'after' window
    _check_order("bbbabaaab", "baabaabbababa", "bbaabaabaababaabbaabbbabaaab", 2)
    rng = random.Random(1)
    for _ in range(6000):  # short patterns packed close: the bounds decide most verdicts
        alphabet = rng.choice(["ab", "abc", "abcd "])
        k = rng.randrange(1, 4)
        patterns = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(3 * (k + 1), 16))) for _ in range(2)]
        parts = []
        for _ in range(rng.randrange(1, 4)):
            parts.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6))))
            parts.append(_mutate(rng, rng.choice(patterns), alphabet, rng.randrange(0, k + 2)))
        _check_order(patterns[0], patterns[1], "".join(parts), k)


def test_order_failure_on_seeded_random_texts():
    rng = random.Random(7)
    for _ in range(3000):
        alphabet = rng.choice(["ab", "abc", "abcd ", "abcdefghij "])
        k = rng.randrange(0, 4)
        patterns = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(max(1, 3 * (k + 1) - 2), 30)))
                    for _ in range(2)]
        parts = []
        for _ in range(rng.randrange(0, 7)):
            parts.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 25))))
            parts.append(_mutate(rng, rng.choice(patterns), alphabet, rng.randrange(0, k + 3)))
        _check_order(patterns[0], patterns[1], "".join(parts), k)


@settings(max_examples=300, deadline=None)
@given(st.text("ab -", min_size=3, max_size=20), st.text("ab -", min_size=3, max_size=20),
       st.text("ab -", max_size=150), st.integers(1, 3))
def test_order_failure_hypothesis(before, after, text, k):
    _check_order(before, after, text, min(k, len(before) // 2, len(after) // 2))


def test_windows_over_the_cache_limit_are_searched_uncached(monkeypatch):
    from olmpipe.bench import nearmatch

    monkeypatch.setattr(nearmatch, "MAX_CACHED_WINDOW", 8)
    rng = random.Random(3)
    for _ in range(200):
        pattern = "".join(rng.choice("abc") for _ in range(rng.randrange(6, 20)))
        text = "".join(rng.choice("abc") for _ in range(rng.randrange(0, 80)))
        _check(pattern, text, rng.randrange(1, 3))
        _check_order(pattern, pattern[::-1], text, 1)

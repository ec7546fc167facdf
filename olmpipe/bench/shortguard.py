"""The short-answer guard: a fuzzy match inside an answer too short to hold the test's text does not count.

olmOCR-Bench's ``present`` test (olmocr v0.4.27 ``olmocr/bench/tests.py:541-575``) passes when
``rapidfuzz.fuzz.partial_ratio(text, answer) / 100 >= 1 - max_diffs / len(text)`` (line 560).
``partial_ratio`` slides the *shorter* string along the longer one, so when the normalized answer
is shorter than the test's text the answer is aligned inside the text: any fragment of the text
scores 100. For "The committee approved the annual budget after a long debate" the answers ``" "``,
``"e"``, ``"\\n"`` (normalized to ``" "``), ``"The"`` and ``"approved"`` all pass. This is
allenai/olmocr issue #461; pull request #462 (head ``aabb122``) adds a length guard before the
fuzzy match (``olmocr/bench/tests.py:178-187`` of that head, a file of olmocr main's layout):

    min_required = len(reference_query) - self.max_diffs
    if len(md_content) < min_required: PRESENT fails, ABSENT passes

The rule is sound: a text of ``L`` characters is within ``k`` edits of no string shorter than
``L - k`` (each missing character costs one edit), so an answer (after normalization, case folding
and ``first_n``/``last_n``, i.e. the ``content`` the match searches) shorter than that cannot hold
the text, however ``partial_ratio`` scores it. olmpipe follows it with these differences:

- **Training only by default.** olmOCR-Bench's verdicts are kept as they are (olmocr v0.4.27 parity
  stays exact): :func:`olmpipe.bench.run.run_tests` always computes the reference verdict and marks
  the passes this rule rejects (:attr:`olmpipe.bench.run.Verdict.short`); the training reward
  counts them as failed when ``rewards.bench.short_answer_guard`` is on (the default), and the
  baseline/evaluate scores report the guarded score beside the reference one.
- **``absent`` tests keep the reference verdict.** PR #462 makes every ``absent`` test pass on an
  answer shorter than its text (lines 186-187). As a statement about the text that is right, but as
  a reward it pays for writing less: every ``absent`` test then passes on any answer shorter than its
  text, which is the behaviour the guard is meant to take away. The reference verdict on such an
  answer (a fragment "found", so the test fails) errs only towards a lower reward for a degenerate
  answer, so the guard leaves it alone.
- **``format`` and ``footnote`` tests too.** They also call ``partial_ratio`` on short strings
  (olmocr main ``olmocr/bench/tests.py:323-324``: the text against each bold/italic/heading span;
  ``722`` and ``748``: the text against the window before/after a footnote marker), so a span
  ``**e**`` passes a bold test of any text containing an ``e``. The same rule applies to the span or
  window the match was found in (PR #462 covers only ``present``/``absent``).
- **``order`` needs no guard.** It searches with ``fuzzysearch.find_near_matches(..., max_l_dist=k)``
  (v0.4.27 ``tests.py:605-606``), a Levenshtein bound, which already finds nothing in an answer
  shorter than ``len - k``. ``table`` compares whole cells with ``fuzz.ratio`` (``tests.py:701``),
  ``math`` renders equations, ``baseline`` counts characters: none aligns a short answer inside a text.

:func:`expected_chars` is what the training signal (``bench/short_high_reward``,
:mod:`olmpipe.rewards.bench_metrics`) compares an answer's length with when a page has no reference
answer: the texts its tests say the page holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Test types whose fuzzy match the guard checks (see the module docstring for why not the others).
GUARDED_TYPES = frozenset({"present", "format", "footnote"})

#: The reason of a test the reference passes and the guard fails.
SHORT_REASON = ("short-answer guard: the answer is too short to contain the test's text; it passed only "
                "through a fuzzy match of a fragment (olmocr #461)")


def too_short(content_chars: int, text_chars: int, max_diffs: int) -> bool:
    """Whether a string of ``content_chars`` characters is too short to hold a text of ``text_chars``
    characters within ``max_diffs`` edits (PR #462's ``len(md_content) < len(reference_query) - max_diffs``).

    >>> too_short(3, 60, 0), too_short(59, 60, 1), too_short(58, 60, 1)
    (True, False, True)
    """
    return content_chars < text_chars - max_diffs


def _searched_texts(test: Any) -> list[str]:
    """The texts a test looks for in an answer (normalized where the test normalizes them)."""
    kind = test.type
    if kind == "present":
        return [test._query]
    if kind == "order":
        return [test._before, test._after]
    if kind == "format":
        return [test._query]
    if kind == "table":
        return [test.cell]
    if kind == "math":
        return [test.math]
    if kind == "footnote":
        return [t for t in (test.appears_before_marker, test.appears_after_marker, test.marker) if t]
    return []  # absent (must not be there), baseline (no text)


def expected_chars(tests: Iterable[Any]) -> int:
    """The characters a page's tests say it holds: the total length of the distinct texts its
    ``present``, ``order``, ``format``, ``table``, ``math`` and ``footnote`` tests look for.

    A lower bound of a full answer's length up to texts that overlap on the page; 0 for a page with
    only ``absent`` and ``baseline`` tests (no answer is "short" there).

    >>> from olmpipe.bench import test_from_record
    >>> tests = [test_from_record({"pdf": "a.pdf", "page": 1, "id": str(i), "type": "present", "text": t})
    ...          for i, t in enumerate(["Hello  world", "Hello world", "Bye"])]
    >>> expected_chars(tests)
    14
    """
    texts = {text for test in tests for text in _searched_texts(test)}
    return sum(len(text) for text in texts)

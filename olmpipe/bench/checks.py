"""The checks of the text test types (present, absent, order, baseline, format, footnote).

Each ``check_<type>(test, page)`` takes a test from :mod:`olmpipe.bench.model` and a
:class:`~olmpipe.bench.pagetext.PageText` and returns ``(passed, reason)`` with the reference's
verdict (olmocr 0.4.27 ``tests.py``; ``format``/``footnote`` from olmocr main). Table checks live in
:mod:`olmpipe.bench.tables`; math goes to ``olmpipe.bench.mathtest``. The checks whose fuzzy match
the short-answer guard looks at (``present``/``absent``, ``format``, ``footnote``;
:mod:`olmpipe.bench.shortguard`) return ``(passed, reason, short)`` instead: ``short`` is True when
the reference passes the test only through a match inside a string too short to hold its text.

Speed-ups that cannot change a verdict: an exact substring hit short-cuts ``partial_ratio`` (it
would return 100), and rapidfuzz prunes with a ``score_cutoff`` just under the threshold (scores at
or above it are exact; a failed ``present`` test recomputes the exact score for its reason, unless
that would cost more than :data:`EXACT_REASON_CELLS` -- then the reason only says the score was
below the threshold);
``order`` tests with ``max_diffs == 0`` use ``str.find``/``rfind`` (fuzzysearch returns exactly the
exact occurrences then), fuzzy ones search only the windows around n-gram hits that the verdict
depends on (:mod:`olmpipe.bench.nearmatch`); alphanumeric counts stop as soon as the answer is known.
"""

from __future__ import annotations

import re
from itertools import islice

from rapidfuzz import fuzz

from olmpipe.bench.nearmatch import order_failure
from olmpipe.bench.normalize import normalize_text
from olmpipe.bench.repeat import ngram_repeats
from olmpipe.bench.shortguard import too_short

_IMAGE_TAG = re.compile(r"!\[.*?\]\(.*?\)")
_DISALLOWED = re.compile(
    "["
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\U0001f600-\U0001f64f"  # emoticons
    "\U0001f300-\U0001f5ff"  # misc symbols and pictographs
    "\U0001f680-\U0001f6ff"  # transport and map symbols
    "\U0001f1e0-\U0001f1ff"  # regional indicators (flags)
    "]"
)


#: Largest ``len(text) x len(page)`` for which a failed ``present`` test computes its exact best
#: score for the reason (without the cutoff's pruning): 10^7 cells take ~0.1 s (a 1,000-character
#: text on a 10,000-character page). A 10,000-character text on a 12,000-character page took 62 s
#: for that score alone (3.7 s for the verdict), inside the trainer's reward.
EXACT_REASON_CELLS = 10_000_000


def _partial_ratio(query: str, content: str, threshold: float) -> float:
    """``fuzz.partial_ratio(query, content) / 100`` where it is >= ``threshold``; below it, some
    value below ``threshold`` (rapidfuzz's ``score_cutoff`` prunes; scores at or above the cutoff
    are exact, and the cutoff sits just under the threshold so the comparison is unchanged)."""
    if query and query in content:
        return 1.0
    cutoff = max(0.0, threshold * 100.0 - 1e-6)
    return fuzz.partial_ratio(query, content, score_cutoff=cutoff) / 100.0


def check_presence(test, page) -> tuple[bool, str, bool]:
    """``present`` / ``absent``: fuzzy substring search of the normalized text.

    ``short``: a ``present`` test passed although the searched content is too short to hold its
    text (PR #462's rule, :func:`~olmpipe.bench.shortguard.too_short`); ``absent`` tests keep the
    reference verdict under the guard (see :mod:`olmpipe.bench.shortguard`), so theirs is False.
    """
    query = test._query
    content = page.normalized if test.case_sensitive else page.normalized_lower
    first_n, last_n = test.first_n, test.last_n
    if first_n and last_n:
        content = content[:first_n] + content[-last_n:]
    elif first_n:
        content = content[:first_n]
    elif last_n:
        content = content[-last_n:]
    threshold = 1.0 - (test.max_diffs / (len(query) if len(query) > 0 else 1))
    best = _partial_ratio(query, content, threshold)
    if test.type == "present":
        if best >= threshold:
            return True, "", too_short(len(content), len(query), test.max_diffs)
        if len(query) * len(content) > EXACT_REASON_CELLS:
            return False, (f"Expected '{query[:40]}...' with threshold {threshold} but best match ratio was below it "
                           f"(not computed exactly for a {len(query)}-character text)"), False
        best = fuzz.partial_ratio(query, content) / 100.0  # the exact score, for the reason only
        return False, f"Expected '{query[:40]}...' with threshold {threshold} but best match ratio was {best:.3f}", False
    if best < threshold:
        return True, "", False
    return False, (f"Expected absence of '{query[:40]}...' with threshold {threshold} "
                   f"but best match ratio was {best:.3f}"), False


def _order_shortcut(before: str, after: str, content: str) -> bool:
    """True when the verdict is certainly "pass" without a fuzzy search.

    Every exact occurrence is a distance-0 match, and fuzzysearch keeps one distance-0 match (an
    exact occurrence) of each group of overlapping matches; so the first reported 'before' start is
    at most the last exact occurrence of 'before', and the last reported 'after' start at least
    the first exact occurrence of 'after'.
    """
    last_before = content.rfind(before)
    first_after = content.find(after)
    return 0 <= last_before < first_after


def check_order(test, page) -> tuple[bool, str]:
    """``order``: the first near match of ``before`` starts before the last near match of ``after``
    (the reference's "some before start < some after start"); see :mod:`olmpipe.bench.nearmatch`."""
    content = page.normalized
    if test.max_diffs and _order_shortcut(test._before, test._after, content):
        return True, ""
    failure = order_failure(test._before, test._after, content, test.max_diffs)
    if failure is None:
        return True, ""
    if failure == "before":
        return False, f"'before' text '{test._before[:40]}...' not found with max_l_dist {test.max_diffs}"
    if failure == "after":
        return False, f"'after' text '{test._after[:40]}...' not found with max_l_dist {test.max_diffs}"
    return False, f"Could not find a location where '{test._before[:40]}...' appears before '{test._after[:40]}...'."


def _alnum_count_exceeds(text: str, limit: int) -> tuple[bool, int]:
    """(count > limit, count up to limit + 1) of alphanumeric characters, stopping early."""
    count = sum(1 for _ in islice(filter(str.isalnum, text), limit + 1))
    return count > limit, count


def check_baseline(test, page) -> tuple[bool, str]:
    """``baseline``: blank-page length check, or non-empty + no repetition loop + allowed scripts."""
    content = page.raw
    if test.max_length is not None:
        if test.max_length_skips_image_alt_tags:
            content = _IMAGE_TAG.sub("", content)
        too_long, _ = _alnum_count_exceeds(content, test.max_length)
        if too_long:
            total = sum(map(str.isalnum, content))
            return False, f"{total} characters were output for a page we expected to be blank"
        return True, ""
    if not any(map(str.isalnum, content)):
        return False, "The text contains no alpha numeric characters"
    for index, count in enumerate(ngram_repeats(content, 5)):
        if count > test.max_repeats:
            return False, f"Text ends with {count} repeating {index + 1}-grams, invalid"
    if test.check_disallowed_characters:
        found = [m.group() for m in islice(_DISALLOWED.finditer(content), 20)]
        if found:
            return False, f"Text contains disallowed characters {found}"
    return True, ""


# ------------------------------------------------------------------------- format (olmocr main)
_HEADING_MD = re.compile(r"^#{1,6}\s+(.+?)$", re.MULTILINE)
_HEADING_HTML = re.compile(r"<h[1-6][^>]*>(.*?)</h[1-6]>", re.IGNORECASE | re.DOTALL)
_FORMAT_PATTERNS = {
    "heading": (_HEADING_MD, _HEADING_HTML),
    "bold": (
        re.compile(r"\*\*(.*?)\*\*", re.DOTALL),
        re.compile(r"__(.*?)__", re.DOTALL),
        re.compile(r"<b[^>]*>(.*?)</b>", re.IGNORECASE | re.DOTALL),
        re.compile(r"<strong[^>]*>(.*?)</strong>", re.IGNORECASE | re.DOTALL),
    ),
    "italic": (
        re.compile(r"(?<!\*)\*(?!\*)(.*?)(?<!\*)\*(?!\*)", re.DOTALL),
        re.compile(r"(?<!_)_(?!_)(.*?)(?<!_)_(?!_)", re.DOTALL),
        re.compile(r"<i[^>]*>(.*?)</i>", re.IGNORECASE | re.DOTALL),
        re.compile(r"<em[^>]*>(.*?)</em>", re.IGNORECASE | re.DOTALL),
    ),
}


def check_format(test, page) -> tuple[bool, str, bool]:
    """``format``: ``text`` occurs (fuzzily) inside a heading / bold / italic span of the page.

    ``short``: every span that matched is too short to hold the text (``**e**`` for a bold test of
    any text with an ``e``); the search goes on past a short match for one long enough, so the
    verdict stays the reference's.
    """
    spans = [m for pattern in _FORMAT_PATTERNS[test.format] for m in pattern.findall(page.raw)]
    spans = [normalize_text(s) for s in spans]
    if not test.case_sensitive:
        spans = [s.lower() for s in spans]
    query = test._query
    threshold = 1.0 - (test.max_diffs / (len(query) if len(query) > 0 else 1))
    short_match = False
    for span in spans:
        if fuzz.partial_ratio(query, span) / 100.0 >= threshold:
            if not too_short(len(span), len(query), test.max_diffs):
                return True, "", False
            short_match = True
    if short_match:
        return True, "", True
    if spans:
        sample = ", ".join(f"'{s[:20]}...'" if len(s) > 20 else f"'{s}'" for s in spans[:3])
        found = f"Found {test.format} text: {sample}"
    else:
        found = f"No {test.format} formatted text found"
    return False, f"Text '{test.text[:40]}...' not found with {test.format} formatting. {found}", False


# ----------------------------------------------------------------------- footnote (olmocr main)
_SUPERSCRIPT_DIGITS = str.maketrans("0123456789", "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")
_FOOTNOTE_WINDOW = 200


def _alnum_lower(text: str) -> str:
    return "".join(c for c in normalize_text(text) if c.isalnum()).lower()


def _marker_spans(marker: str, content: str) -> list[tuple[int, int]]:
    escaped = re.escape(marker)
    spans = [m.span() for m in re.finditer(rf"\[\^{escaped}\](?!:)", content)]
    spans += [m.span() for m in re.finditer(rf"<sup[^>]*>{escaped}</sup>", content, re.IGNORECASE)]
    if marker.isascii() and marker.isdigit():
        spans += [m.span() for m in re.finditer(re.escape(marker.translate(_SUPERSCRIPT_DIGITS)), content)]
    return spans


def _near_marker(target: str, spans, content: str, max_diffs: int, before: bool) -> tuple[bool, bool]:
    """(found near some marker, found only in windows too short to hold the target)."""
    clean_target = _alnum_lower(target)
    threshold = 1.0 - (max_diffs / (len(target) if len(target) > 0 else 1))
    short_match = False
    for start, end in spans:
        window = content[max(0, start - _FOOTNOTE_WINDOW):start] if before else content[end:end + _FOOTNOTE_WINDOW]
        clean = _alnum_lower(window)
        if not clean:
            continue
        n = min(len(clean), len(clean_target) * 2)
        if n > 0:
            clean = clean[-n:] if before else clean[:n]
        if fuzz.partial_ratio(clean_target, clean) / 100.0 >= threshold:
            if not too_short(len(clean), len(clean_target), max_diffs):
                return True, False
            short_match = True
    return short_match, short_match


def check_footnote(test, page) -> tuple[bool, str, bool]:
    """``footnote``: the marker occurs, with the given text right before / after one occurrence.

    ``short``: a text was found only in windows too short to hold it (``[^1] a`` for any text
    after the marker that contains an ``a``).
    """
    content = page.raw
    spans = _marker_spans(test.marker, content)
    if not spans:
        return False, (f"Footnote marker '{test.marker}' not found as [^{test.marker}], "
                       f"<sup>{test.marker}</sup>, or superscript"), False
    before_text = normalize_text(test.appears_before_marker) if test.appears_before_marker else None
    after_text = normalize_text(test.appears_after_marker) if test.appears_after_marker else None
    failures = []
    short = False
    for text, before in ((before_text, True), (after_text, False)):
        if not text:
            continue
        found, only_short = _near_marker(text, spans, content, test.max_diffs, before=before)
        short = short or only_short
        if not found:
            where = "before" if before else "after"
            failures.append(f"Text '{text[:40]}...' not found {where} any occurrence of marker '{test.marker}'")
    return (False, "; ".join(failures), False) if failures else (True, "", short)

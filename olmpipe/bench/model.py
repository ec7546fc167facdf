"""olmOCR-Bench test records: typed dataclasses, validation and the JSONL loader.

A test file is JSON Lines, one test per line (blank lines are skipped), with the common fields
``pdf``, ``page``, ``id``, ``type``, ``max_diffs`` (default 0), ``checked`` (``"verified"``,
``"rejected"`` or null) and ``url``, plus the fields of its type:

========== ================================================================================
type       fields
========== ================================================================================
present    text, case_sensitive (true), first_n, last_n
absent     same as present
order      before, after
table      cell, up, down, left, right, top_heading, left_heading, ignore_markdown_tables
math       math, ignore_dollar_delimited
baseline   max_length, max_length_skips_image_alt_tags, max_repeats (30),
           check_disallowed_characters (true)
format     text, format (heading | bold | italic), case_sensitive
footnote   marker, appears_before_marker, appears_after_marker
========== ================================================================================

Validation follows the reference (olmocr 0.4.27 ``tests.py``) and adds checks the reference lets
through but that make a test meaningless (wrong field types, unknown fields, ``max_diffs`` larger
than the text it compares: at or past a present/absent/format/footnote text's length the fuzzy
threshold is <= 0, past a table's longest field every threshold is at its 0.5 floor, and a math test
ignores it, so past the equation's length it is a mistake; ``baseline`` compares no text and, as in
the reference, ignores it unchecked). Every problem becomes a :class:`TestLoadError`
naming the file, the line, the test id and the reason::

    tests = load_tests("data/bench/olmocr-sample/dataset.jsonl")
    tests, errors = load_tests(lines, collect_errors=True, source="mine.jsonl")
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from olmpipe.bench.normalize import normalize_text

TEST_TYPES = ("present", "absent", "order", "table", "math", "baseline", "format", "footnote")
CHECKED_VALUES = ("verified", "rejected")
FORMATS = ("heading", "bold", "italic")


class TestLoadError(ValueError):
    """A test record that cannot be used; ``str()`` reads ``file:line: test 'id': reason``."""

    __test__ = False  # not a pytest class

    def __init__(self, reason: str, *, file: str | None = None, line: int | None = None,
                 test_id: str | None = None) -> None:
        self.file, self.line, self.test_id, self.reason = file, line, test_id, reason
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"{self.file or '<tests>'}:{self.line if self.line is not None else '?'}"
        who = f" test {self.test_id!r}:" if self.test_id else ""
        return f"{where}:{who} {self.reason}"

    def __reduce__(self):
        return (_rebuild_error, (self.reason, self.file, self.line, self.test_id))

    def to_dict(self) -> dict:
        """The ``{"file", "line", "test_id", "reason"}`` record of the validate report."""
        return {"file": self.file, "line": self.line, "test_id": self.test_id, "reason": self.reason}


def _rebuild_error(reason, file, line, test_id):
    return TestLoadError(reason, file=file, line=line, test_id=test_id)


def _fail(reason: str) -> None:
    raise TestLoadError(reason)


def _check_str(name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        _fail(f"field {name!r} must be a string, got {type(value).__name__}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        _fail(f"field {name!r} must be true or false, got {value!r}")


def _check_int(name: str, value: Any, *, optional: bool = False, minimum: int = 0) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(f"field {name!r} must be an integer, got {value!r}")
    if value < minimum:
        _fail(f"field {name!r} must be >= {minimum}, got {value}")


def _nonempty(name: str, normalized: str | None) -> None:
    if not normalized or not normalized.strip():
        _fail(f"field {name!r} is empty (after normalization); give the text the test looks for")


@dataclass(frozen=True, kw_only=True, eq=False)
class Test:
    """Fields common to every olmOCR-Bench test; subclasses add their own and a ``type``.

    ``source`` is the JSONL file name the test came from (``"dataset.jsonl"``; ``"baseline"`` for
    the automatic baseline tests) and ``line`` its 1-based line there (None when built in code).
    Tests are immutable and picklable, so a scorer can ship them to worker processes.
    """

    __test__: ClassVar[bool] = False  # not a pytest class

    TYPES: ClassVar[tuple[str, ...]] = ()

    pdf: str
    page: int
    id: str
    type: str
    max_diffs: int = 0
    checked: str | None = None
    url: str | None = None
    source: str | None = field(default=None, compare=False)
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check_str("pdf", self.pdf)
        if not self.pdf:
            _fail("field 'pdf' is empty; give the PDF path relative to pdfs/")
        _check_str("id", self.id)
        if not self.id:
            _fail("field 'id' is empty")
        _check_int("page", self.page, minimum=1)
        if self.type not in self.TYPES:
            _fail(f"type {self.type!r} does not belong to {type(self).__name__}")
        _check_int("max_diffs", self.max_diffs)
        if self.checked is not None and self.checked not in CHECKED_VALUES:
            _fail(f"field 'checked' must be one of {CHECKED_VALUES} or null, got {self.checked!r}")
        _check_str("url", self.url, optional=True)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def to_record(self) -> dict:
        """The JSON object of this test as a test file holds it (no ``source``/``line``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("source", "line") or f.name.startswith("_"):
                continue
            value = getattr(self, f.name)
            if f.name in ("pdf", "page", "id", "type") or value != f.default:
                out[f.name] = value
        return out

    def run(self, text: object):
        """Run this test alone on ``text`` and return its :class:`~olmpipe.bench.run.Verdict`."""
        from olmpipe.bench.run import run_tests

        return run_tests(text, [self])[0]


@dataclass(frozen=True, kw_only=True, eq=False)
class PresenceTest(Test):
    """``present``: ``text`` occurs (fuzzily, up to ``max_diffs`` edits); ``absent``: it does not."""

    TYPES: ClassVar[tuple[str, ...]] = ("present", "absent")

    text: str
    case_sensitive: bool = True
    first_n: int | None = None
    last_n: int | None = None
    _query: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str("text", self.text)
        _check_bool("case_sensitive", self.case_sensitive)
        _check_int("first_n", self.first_n, optional=True)
        _check_int("last_n", self.last_n, optional=True)
        query = normalize_text(self.text)
        _nonempty("text", query)
        if not self.case_sensitive:
            query = query.lower()
        if self.max_diffs >= len(query):
            _fail(f"max_diffs {self.max_diffs} is too large for a text of {len(query)} characters "
                  f"(the fuzzy threshold would be <= 0)")
        self._set("_query", query)


@dataclass(frozen=True, kw_only=True, eq=False)
class OrderTest(Test):
    """``order``: ``before`` occurs before ``after`` (each within ``max_diffs`` edits)."""

    TYPES: ClassVar[tuple[str, ...]] = ("order",)

    before: str
    after: str
    _before: str = field(default="", init=False, repr=False, compare=False)
    _after: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str("before", self.before)
        _check_str("after", self.after)
        before, after = normalize_text(self.before), normalize_text(self.after)
        _nonempty("before", before)
        _nonempty("after", after)
        if self.max_diffs > len(before) // 2 or self.max_diffs > len(after) // 2:
            _fail(f"max_diffs {self.max_diffs} is too large: more than half of 'before' "
                  f"({len(before)} chars) or 'after' ({len(after)} chars)")
        self._set("_before", before)
        self._set("_after", after)


_TABLE_NEIGHBOURS = ("up", "down", "left", "right", "top_heading", "left_heading")


@dataclass(frozen=True, kw_only=True, eq=False)
class TableTest(Test):
    """``table``: a cell matching ``cell`` whose neighbours / headings match the given strings."""

    TYPES: ClassVar[tuple[str, ...]] = ("table",)

    cell: str
    up: str = ""
    down: str = ""
    left: str = ""
    right: str = ""
    top_heading: str = ""
    left_heading: str = ""
    ignore_markdown_tables: bool = False
    _norm: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str("cell", self.cell)
        _nonempty("cell", normalize_text(self.cell))
        for name in _TABLE_NEIGHBOURS:
            value = getattr(self, name)
            if value is None:
                self._set(name, "")
            else:
                _check_str(name, value)
        _check_bool("ignore_markdown_tables", self.ignore_markdown_tables)
        norm = {name: normalize_text(getattr(self, name)) for name in ("cell", *_TABLE_NEIGHBOURS)}
        # Each field is compared with the threshold max(0.5, 1 - max_diffs / len(field))
        # (olmocr 0.4.27 bench/tests.py, TableTest.run, lines 673-674 and 719-847): past the longest
        # field's length every threshold sits at its 0.5 floor, so a larger value only hides a typo.
        longest = max(len(text) for text in norm.values())
        if self.max_diffs > longest:
            _fail(f"max_diffs {self.max_diffs} is larger than the longest text this table test compares "
                  f"({longest} characters in 'cell' and its neighbours); beyond that every similarity "
                  f"threshold is already at its 0.5 floor")
        self._set("_norm", norm)


@dataclass(frozen=True, kw_only=True, eq=False)
class MathTest(Test):
    """``math``: an equation of the page renders like ``math`` (KaTeX; see ``olmpipe.bench.mathtest``)."""

    TYPES: ClassVar[tuple[str, ...]] = ("math",)

    math: str
    ignore_dollar_delimited: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str("math", self.math)
        if not self.math.strip():
            _fail("field 'math' is empty; give the LaTeX of the equation")
        # olmocr 0.4.27 MathTest.run (bench/tests.py, lines 949-996) never reads max_diffs; a value
        # beyond the equation's length can only be a mistake, most likely a test meant for another type.
        if self.max_diffs > len(self.math.strip()):
            _fail(f"max_diffs {self.max_diffs} is larger than the equation ({len(self.math.strip())} characters); "
                  f"math tests do not use max_diffs (the rendering is compared), so give 0")
        _check_bool("ignore_dollar_delimited", self.ignore_dollar_delimited)


@dataclass(frozen=True, kw_only=True, eq=False)
class BaselineTest(Test):
    """``baseline``: the page is not empty, does not end in a repetition loop, has no CJK/emoji;
    with ``max_length`` it instead checks that a blank page stays (nearly) blank."""

    TYPES: ClassVar[tuple[str, ...]] = ("baseline",)

    max_length: int | None = None
    max_length_skips_image_alt_tags: bool = False
    max_repeats: int = 30
    check_disallowed_characters: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int("max_length", self.max_length, optional=True)
        _check_bool("max_length_skips_image_alt_tags", self.max_length_skips_image_alt_tags)
        _check_int("max_repeats", self.max_repeats)
        _check_bool("check_disallowed_characters", self.check_disallowed_characters)


@dataclass(frozen=True, kw_only=True, eq=False)
class FormatTest(Test):
    """``format`` (olmocr main): ``text`` appears as a heading, in bold or in italics."""

    TYPES: ClassVar[tuple[str, ...]] = ("format",)

    text: str
    format: str
    case_sensitive: bool = True
    _query: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str("text", self.text)
        _check_str("format", self.format)
        if self.format not in FORMATS:
            _fail(f"field 'format' must be one of {FORMATS}, got {self.format!r}")
        _check_bool("case_sensitive", self.case_sensitive)
        query = normalize_text(self.text)
        _nonempty("text", query)
        if self.max_diffs >= len(query):
            _fail(f"max_diffs {self.max_diffs} is too large for a text of {len(query)} characters")
        self._set("_query", query if self.case_sensitive else query.lower())


@dataclass(frozen=True, kw_only=True, eq=False)
class FootnoteTest(Test):
    """``footnote`` (olmocr main): marker ``[^m]``, ``<sup>m</sup>`` or superscript digits, with the
    given text just before / after one of its occurrences."""

    TYPES: ClassVar[tuple[str, ...]] = ("footnote",)

    marker: str
    appears_before_marker: str | None = None
    appears_after_marker: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str("marker", self.marker)
        if not self.marker:
            _fail("field 'marker' is empty")
        if " " in self.marker:
            _fail(f"field 'marker' cannot contain spaces, got {self.marker!r}")
        compared = []
        for name in ("appears_before_marker", "appears_after_marker"):
            value = getattr(self, name)
            _check_str(name, value, optional=True)
            if value:
                _nonempty(name, normalize_text(value))
                compared.append((name, normalize_text(value)))
        # The texts around the marker pass at a ratio of 1 - max_diffs / len(text) (checks.py,
        # _near_marker, after olmocr main's FootnoteTest): at max_diffs >= len(text) that is <= 0 and
        # the text matches anything. Without texts only the marker is looked for, exactly.
        for name, text in compared:
            if self.max_diffs >= len(text):
                _fail(f"max_diffs {self.max_diffs} is too large for {name!r} of {len(text)} characters "
                      f"(the fuzzy threshold would be <= 0, so any text would pass)")
        if not compared and self.max_diffs > len(self.marker):
            _fail(f"max_diffs {self.max_diffs} is larger than the marker ({len(self.marker)} characters), "
                  f"the only text this footnote test compares (exactly); give 0")


TEST_CLASSES: dict[str, type[Test]] = {
    t: cls
    for cls in (PresenceTest, OrderTest, TableTest, MathTest, BaselineTest, FormatTest, FootnoteTest)
    for t in cls.TYPES
}


def test_from_record(record: Mapping[str, Any], *, source: str | None = None,
                     line: int | None = None) -> Test:
    """Build the test of one JSON object; raises :class:`TestLoadError` naming file, line, id."""
    test_id = record.get("id") if isinstance(record, Mapping) else None
    test_id = test_id if isinstance(test_id, str) else (None if test_id is None else repr(test_id))
    try:
        if not isinstance(record, Mapping):
            _fail(f"a test must be a JSON object, got {type(record).__name__}")
        test_type = record.get("type")
        cls = TEST_CLASSES.get(test_type) if isinstance(test_type, str) else None
        if cls is None:
            _fail(f"unknown test type {test_type!r}; expected one of {', '.join(TEST_TYPES)}")
        names = {f.name for f in dataclasses.fields(cls) if f.init and f.name not in ("source", "line")}
        unknown = sorted(set(record) - names)
        if unknown:
            _fail(f"unknown field(s) {', '.join(map(repr, unknown))} for a {test_type!r} test")
        missing = sorted(
            f.name for f in dataclasses.fields(cls)
            if f.init and f.name in names and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING and f.name not in record
        )
        if missing:
            _fail(f"missing field(s) {', '.join(map(repr, missing))} for a {test_type!r} test")
        return cls(**record, source=source, line=line)
    except TestLoadError as exc:
        raise TestLoadError(exc.reason, file=source, line=line, test_id=test_id) from None


test_from_record.__test__ = False  # type: ignore[attr-defined]


def _iter_lines(path_or_lines, source: str | None) -> tuple[str, Iterable[tuple[int, Any]]]:
    """(source name, iterator of (line number, raw line or dict))."""
    if isinstance(path_or_lines, (str, os.PathLike)):
        path = Path(path_or_lines)
        name = source or path.name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise TestLoadError(f"cannot read test file: {exc.strerror or exc}", file=str(path)) from None
        return name, enumerate(data.split(b"\n"), start=1)
    return source or "<lines>", enumerate(path_or_lines, start=1)


def load_tests(path_or_lines, *, collect_errors: bool = False, source: str | None = None):
    """Load olmOCR-Bench tests from a JSONL file or from an iterable of lines / dicts.

    Returns ``list[Test]``; raises the first :class:`TestLoadError` (file, line, id, reason).
    With ``collect_errors=True`` nothing is raised for bad records: the result is
    ``(tests, errors)`` with every valid test and one :class:`TestLoadError` per bad line.
    Duplicate ids within one call are errors. ``source`` names the file in errors and in
    ``Test.source`` (default: the file's name, or ``"<lines>"``).
    """
    name, numbered = _iter_lines(path_or_lines, source)
    tests: list[Test] = []
    errors: list[TestLoadError] = []
    seen: dict[str, int | None] = {}
    for lineno, raw in numbered:
        try:
            record = _parse_line(raw, name, lineno)
            if record is None:
                continue
            test = test_from_record(record, source=name, line=lineno)
            if test.id in seen:
                raise TestLoadError(f"duplicate test id (first seen on line {seen[test.id]})",
                                    file=name, line=lineno, test_id=test.id)
            seen[test.id] = lineno
            tests.append(test)
        except TestLoadError as exc:
            if not collect_errors:
                raise
            errors.append(exc)
    return (tests, errors) if collect_errors else tests


def _parse_line(raw: Any, name: str, lineno: int) -> Mapping | None:
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TestLoadError(f"line is not valid UTF-8 ({exc.reason} at byte {exc.start})",
                                file=name, line=lineno) from None
    if not isinstance(raw, str):
        raise TestLoadError(f"expected a JSON line or object, got {type(raw).__name__}", file=name, line=lineno)
    raw = raw.strip()
    if not raw:
        return None
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TestLoadError(f"malformed JSON: {exc.msg} (column {exc.colno})", file=name, line=lineno) from None
    if not isinstance(record, dict):
        raise TestLoadError(f"a test must be a JSON object, got {type(record).__name__}", file=name, line=lineno)
    return record


def baseline_tests_for(pdfs_or_tests: Iterable, tests: Iterable[Test] = ()) -> list[Test]:
    """The automatic ``baseline`` tests olmOCR-Bench adds: one per PDF that has no baseline test.

    ``pdfs_or_tests`` is an iterable of PDF paths (relative to ``pdfs/``) and/or tests; ``tests``
    are further existing tests. Each PDF without a baseline test among all given tests gets
    ``BaselineTest(id="<pdf>_baseline", pdf=pdf, page=1, type="baseline", source="baseline")``,
    in the order the PDFs were first seen.
    """
    pdfs: dict[str, None] = {}
    existing: list[Test] = list(tests)
    for item in pdfs_or_tests:
        if isinstance(item, Test):
            existing.append(item)
            pdfs.setdefault(item.pdf)
        else:
            pdfs.setdefault(str(item))
    for t in existing:
        pdfs.setdefault(t.pdf)
    covered = {t.pdf for t in existing if t.type == "baseline"}
    return [
        BaselineTest(id=f"{pdf}_baseline", pdf=pdf, page=1, type="baseline", source="baseline")
        for pdf in pdfs
        if pdf not in covered
    ]

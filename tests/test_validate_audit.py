"""olmpipe.validate.audit: what trivial answers earn per page with the configured rewards, guard off and on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmpipe.config import load_config, validate_config
from olmpipe.job.data import PageExample
from olmpipe.rasterize import rasterize_bench
from olmpipe.records.audit import read_audit, read_summary
from olmpipe.validate import run_validate
from olmpipe.validate.audit import (
    ANSWERS,
    audit_examples,
    format_audit,
    run_audit,
    summarize,
    trivial_answers,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "bench" / "olmocr-sample"
SENTENCE = "The committee approved the annual budget after a long debate"
FM = ("---\nprimary_language: de\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
      "is_diagram: False\n---\n")


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """The embedded default's bench (the bundled olmOCR-Bench sample), rasterized small and validated,
    audited with the default config's rewards; returns (records, summary, table)."""
    tmp = tmp_path_factory.mktemp("audit")
    rasterize_bench(SAMPLE, tmp / "rasterize", longest_side=32, on_error="error")
    cfg = validate_config({"bench": {"dir": str(SAMPLE)}, "validate": {"check_math": False}})
    out = tmp / "validate"
    run_validate(cfg, manifest_path=tmp / "rasterize" / "manifest.jsonl", tests_dir=out / "tests",
                 report_path=out / "report.json", pages_path=out / "pages.jsonl")
    summary = run_audit(cfg, pages_path=out / "pages.jsonl", tests_dir=out / "tests",
                        records_path=out / "audit.jsonl", summary_path=out / "audit.json")
    assert read_summary(out / "audit.json") == json.loads(json.dumps(summary))
    return read_audit(out / "audit.jsonl"), summary, format_audit(summary)


def test_every_page_answer_and_guard_is_recorded(embedded):
    records, summary, _ = embedded
    pages = {(r.pdf, r.page) for r in records}
    assert summary["pages"] == len(pages) == 23 and summary["tests"] == 100
    assert len(records) == len(pages) * len(ANSWERS) * 2
    assert {(r.answer, r.guard) for r in records} == {(a, g) for a in ANSWERS for g in (False, True)}
    assert {r.split for r in records} == {"train", "eval"}
    r = records[0]
    assert set(r.rewards) == {"bench_reward", "front_matter_reward", "eos_reward"} and r.ceiling == 2.5


def test_without_the_guard_trivial_answers_pass_present_tests_and_with_it_none(embedded):
    """The acceptance figures: without the guard a trivial answer passes 29 of the 30 present tests
    and passes a test on 17 pages; with it no present test, on 11 pages (absent and blank-page
    tests), and the best trivial reward per page is never higher, and lower on 6 pages (on the
    others the front matter alone already earned as much); the best unit-test reward alone is lower on 12."""
    records, summary, _ = embedded
    assert summary["by_type"]["present"]["off"]["any"] == 29 and summary["by_type"]["present"]["on"]["any"] == 0
    assert summary["by_type"]["absent"]["off"]["any"] == summary["by_type"]["absent"]["on"]["any"] == 24
    assert summary["best"]["off"]["pages_passing_a_test"] == 17 and summary["best"]["on"]["pages_passing_a_test"] == 11
    lower = 0
    for page in summary["pages_best"]:
        off, on = page["off"]["reward"], page["on"]["reward"]
        assert on <= off + 1e-9
        lower += on < off - 1e-9
        assert off > 0  # nonzero everywhere: EOS alone pays, and absent tests pass on an empty page
    assert lower == 6
    units = [(p["off"]["unit_test_reward"], p["on"]["unit_test_reward"]) for p in summary["pages_best"]]
    assert all(on <= off for off, on in units) and sum(on < off for off, on in units) == 12
    assert summary["best"]["on"]["mean_reward"] < summary["best"]["off"]["mean_reward"]
    present_passed = {t for r in records if not r.guard for t in r.passed or [] if r.types[t] == "present"}
    assert len(present_passed) == 29
    assert not any(r.types[t] == "present" for r in records if r.guard for t in r.passed or [])


def test_the_table_shows_both_and_warns(embedded):
    _, summary, table = embedded
    assert table.startswith("Trivial-answer audit: 23 pages, 100 tests; rewards bench 1 + front_matter 1 + eos 1")
    assert "present                        29 -> 0    of 30" in table
    assert "best per page" in table and "Best trivial answer per page" in table
    # pages with only absent tests pay a full answer's reward for the front matter alone
    assert any(p["on"]["share"] == 1.0 and p["on"]["answer"] == "front_matter" for p in summary["pages_best"])
    assert summary["warnings"] and "WARNING: on " in table and "(short-answer guard on)" in table


def _example(tmp_path: Path, tests: list[dict], reference: str | None = None) -> PageExample:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"pdf": "a.pdf", "page": 1, **t}) + "\n" for t in tests), encoding="utf-8")
    return PageExample("a.pdf", 1, "a.png", [t["id"] for t in tests], [str(path)] * len(tests),
                       [t["type"] for t in tests], reference)


def test_the_five_answers_and_the_ceiling_with_a_reference(tmp_path):
    """With a reference answer the front matter answer is the reference's (every field bonus: 1.0),
    edit_distance scores, the ceiling counts both; the word repeated to the limit has no EOS;
    a collapsed group is its own medoid."""
    example = _example(tmp_path, [{"id": "p", "type": "present", "text": SENTENCE}], reference=FM + SENTENCE)
    cfg = load_config()["rewards"]
    cfg["weights"].update(edit_distance=1.0, medoid=0.5)
    records = audit_examples([example], cfg, max_completion_length=5)
    by = {(r.answer, r.guard): r for r in records}
    assert by[("front_matter", False)].rewards["front_matter_reward"] == 1.0
    assert by[("front_matter", False)].ceiling == 1 + 1 + 1 + 1 + 0.5
    assert by[("repeated_word", False)].rewards["eos_reward"] == 0.0 and by[("empty", False)].rewards["eos_reward"] == 1.0
    assert all(r.rewards["medoid_reward"] == 1.0 for r in records)
    for answer in ("whitespace", "one_char", "one_word"):  # three of issue 29's five answers
        assert by[(answer, False)].passed == ["p"] and by[(answer, True)].passed == []
        assert by[(answer, True)].total < by[(answer, False)].total
    assert by[("empty", False)].passed == by[("empty", True)].passed == []


def test_without_a_bench_reward_or_tests_found(tmp_path):
    """No unit-test reward selected: passed is None and the audit still totals the other rewards;
    an example whose test file vanished scores None for the bench reward, not an exception."""
    example = _example(tmp_path, [{"id": "p", "type": "present", "text": SENTENCE}])
    cfg = load_config()["rewards"]
    cfg["weights"]["bench"] = None
    records = audit_examples([example], cfg, max_completion_length=3)
    assert all(r.passed is None for r in records) and records[0].ceiling == 1.5
    summary = summarize(records, warn_share=0.9, guard=True, settings={"weights": {}, "short_answer_guard": True})
    assert summary["by_type"]["present"]["on"]["any"] == 0
    (tmp_path / "t.jsonl").unlink()
    records = audit_examples([example], load_config()["rewards"], max_completion_length=3)
    assert all(r.rewards["bench_reward"] is None for r in records)


def test_trivial_answers_are_what_their_names_say():
    answers = {a.name: a for a in trivial_answers(FM + "text", 4)}
    assert answers["empty"].text == "" and not answers["whitespace"].text.strip()
    assert len(answers["one_char"].text) == 1 and answers["one_word"].text == "The"
    assert answers["front_matter"].text.startswith("---\nprimary_language: de\n")
    assert answers["front_matter_word"].text.endswith("---\nThe")
    assert "Attached is one page of a document" in answers["prompt"].text
    assert answers["repeated_word"].text == "The The The The" and not answers["repeated_word"].eos
    assert trivial_answers("no front matter", 1)[4].text.startswith("---\nprimary_language: en\n")

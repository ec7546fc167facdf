"""olmpipe.records: the one owner of every file that passes between stages."""

from __future__ import annotations

import hashlib
import json

import pytest

from olmpipe.records.files import (
    atomic_path,
    atomic_write,
    file_sha256,
    iter_jsonl,
    publish_dir,
    read_journal,
    staging_dir,
)
from olmpipe.records.generations import (
    GenerationRecord,
    append_generations,
    read_generations,
    write_generations,
)
from olmpipe.records.metrics import append_metrics, read_metrics, truncate_metrics
from olmpipe.records.pages import PageEntry, read_page_index, write_page_index
from olmpipe.records.text import completion_text
from olmpipe.records.verdicts import CandidateVerdict, read_verdicts, write_verdicts


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "sub" / "scores.json"
    atomic_write(target, "old\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half a fi")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["scores.json"]  # no .tmp left behind
    with atomic_path(target) as tmp:
        tmp.write_text("new\n")
        assert target.read_text() == "old\n"  # readers see the old file until the new one is complete
    assert target.read_text() == "new\n"


def test_publish_dir_replaces_a_folder_in_one_step(tmp_path):
    out = tmp_path / "model"
    (out / "stale").mkdir(parents=True)
    tmp = staging_dir(out)
    (tmp / "weights").write_text("w")
    publish_dir(tmp, out)
    assert [p.name for p in out.iterdir()] == ["weights"] and not tmp.exists()


def test_file_sha256_full_and_short(tmp_path):
    path = tmp_path / "page.png"
    path.write_bytes(b"x" * (3 << 20))
    full = hashlib.sha256(path.read_bytes()).hexdigest()
    assert file_sha256(path) == full and file_sha256(str(path), 16) == full[:16]


def test_jsonl_errors_name_file_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n\n[1]\n')
    with pytest.raises(ValueError, match=r"a.jsonl:3: expected a JSON object, got list"):
        list(iter_jsonl(path))
    with pytest.raises(KeyError, match="file not found"):
        list(iter_jsonl(tmp_path / "none.jsonl", error=KeyError))


def test_journal_skips_a_torn_last_line(tmp_path, caplog):
    path = tmp_path / "journal.jsonl"
    path.write_text('{"a": 1}\n{"a": 2')
    assert read_journal(path) == [{"a": 1}]
    assert "last line (interrupted write)" in caplog.text
    assert read_journal(tmp_path / "absent.jsonl") == []


def test_metrics_tolerate_a_torn_last_line_only(tmp_path, caplog):
    """Issue 20 item 6: a trainer killed (or out of disk) while appending step 4 left half a line;
    resuming from the step-2 checkpoint stopped with ``metrics.jsonl:4: not valid JSON``. The torn
    last line is now dropped with a warning naming it; a torn line before the last is still an error."""
    for step in (1, 2, 3):
        append_metrics(tmp_path, {"step": step, "loss": 0.5})
    path = tmp_path / "metrics.jsonl"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"step": 4, "lo')
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert f"{path}:4: ignoring the unreadable last line" in caplog.text
    assert truncate_metrics(tmp_path, 2) == 2
    assert path.read_text(encoding="utf-8").splitlines() == ['{"step": 1, "loss": 0.5}', '{"step": 2, "loss": 0.5}']
    append_metrics(tmp_path, {"step": 3, "loss": 0.25})  # the resumed run continues a clean file
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        truncate_metrics(tmp_path, 1)


def test_completion_text_is_the_one_reduction_the_rewards_and_the_scorer_use():
    from olmpipe.bench.normalize import coerce_text
    from olmpipe.rewards.text import completion_text as reward_text

    assert reward_text is completion_text
    chat = [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert completion_text(chat) == "ab" and coerce_text(chat) == "ab"
    assert completion_text(b"\xffx") == "\ufffdx" and coerce_text(None) == ""


def test_page_index_round_trip_and_errors(tmp_path):
    path = tmp_path / "pages.jsonl"
    entry = PageEntry("d/é.pdf", 1, "img.png", "eval", "bench", ["t1"], {"t1": "x.jsonl"}, {"t1": "present"})
    write_page_index(path, [entry, PageEntry(**{**entry.__dict__, "page": 2, "split": "train"})])
    assert "\\u00e9" in path.read_text()  # ASCII, as the validate stage always wrote it
    (rec,) = read_page_index(path, split="eval")
    assert rec["pdf"] == "d/é.pdf" and rec["_line"] == 1
    path.write_text(path.read_text().splitlines()[0] + "\n" + json.dumps({"pdf": "x.pdf", "page": 0}) + "\n")
    with pytest.raises(ValueError, match=r"pages.jsonl:2: page entry misses image, split"):
        read_page_index(path)


def test_generations_verdicts_metrics_round_trip(tmp_path):
    record = GenerationRecord(
        pdf="a.pdf", page=1, repeat=0, image="i.png", image_sha256="0" * 16, model="m", backend="echo",
        prompt="p", settings="s", text="tëxt", raw="tëxt", front_matter=None, front_matter_error=None,
        finish_reason="stop", prompt_tokens=1, completion_tokens=2, seconds=0.1,
    )
    write_generations(tmp_path / "generations.jsonl", [record])
    append_generations(tmp_path / "journal.jsonl", [record, record])
    assert [GenerationRecord.from_json(r) for r in read_generations(tmp_path / "generations.jsonl")] == [record]
    assert len(read_journal(tmp_path / "journal.jsonl")) == 2

    verdict = CandidateVerdict("t1", "present", "x.jsonl", "a.pdf", 1, 0, False, "missing")
    write_verdicts(tmp_path / "verdicts.jsonl", [verdict])
    assert [row for _, row in read_verdicts(tmp_path / "verdicts.jsonl")] == [verdict.to_dict()]

    for step in (1, 2, 3):
        append_metrics(tmp_path, {"step": step, "reward": step / 10})
    assert truncate_metrics(tmp_path, 2) == 2
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["step,reward", "1,0.1", "2,0.2"]


def test_one_copy_of_each_shared_helper():
    """atomic writes, hashes and completion text live in olmpipe.records only (issue 14)."""
    import re
    from pathlib import Path

    import olmpipe

    root = Path(olmpipe.__file__).parent
    pattern = re.compile(r"^\s*def (file_sha256|atomic_write|completion_text|iter_jsonl|_write_json|_write_jsonl)\(", re.MULTILINE)
    found = {str(p.relative_to(root)): pattern.findall(p.read_text()) for p in root.rglob("*.py")}
    found = {k: v for k, v in found.items() if v}
    assert set(found) == {"records/files.py", "records/text.py"}, found
    tmp_renames = [str(p.relative_to(root)) for p in root.rglob("*.py")
                   if p.parts[-2] != "records" and re.search(r"\.tmp\"\)|\+ \"\.tmp\"", p.read_text())]
    assert tmp_renames == [], tmp_renames

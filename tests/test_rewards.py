"""Tests of olmpipe.rewards: parity of the unit-test rewards with olmOCR's GRPO reward, the answer
and reference rewards, the TRL contract (names, pickling, None rows), filters, hostile completions."""

from __future__ import annotations

import importlib.util
import json
import pickle
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olmpipe.config import load_config
from olmpipe.rewards import (
    REWARD_NAMES,
    BenchReward,
    EditDistanceReward,
    EosReward,
    MedoidReward,
    TestLookupError,
    bench_reward,
    build_rewards,
    completion_text,
    element_count_reward,
    front_matter_reward,
    rect_tables_reward,
    scored_text,
    table_is_rectangular,
)
from olmpipe.rewards.reference import _page_text, medoid_agreement

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "bench" / "olmocr-sample"
PARITY = ROOT.parent / "shared" / "bench" / "parity-dev"
HAS_MATH = importlib.util.find_spec("olmpipe.bench.mathtest") is not None

FM = ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
      "is_table: False\nis_diagram: False\n---\n")


def _earnings_ids() -> list[str]:
    ids = []
    for line in filter(str.strip, (SAMPLE / "dataset.jsonl").read_text(encoding="utf-8").splitlines()):
        record = json.loads(line)
        if record["pdf"] == "earnings.pdf":
            ids.append(record["id"])
    return ids


@pytest.fixture(scope="module")
def scorer_reward():
    """One micro and one macro reward with olmOCR's semantics (the short-answer guard off), sharing
    the module (one worker process each)."""
    micro = BenchReward(average="micro", processes=1, short_answer_guard=False)
    macro = BenchReward(average="macro", processes=1, short_answer_guard=False)
    yield micro, macro
    micro.close()
    macro.close()


def _variants(with_math: bool):
    rows = [json.loads(line) for line in (PARITY / "variants.jsonl").read_text(encoding="utf-8").splitlines()]
    types = {}
    for name in ("dataset.jsonl", "blanks.jsonl"):
        for line in filter(str.strip, (SAMPLE / name).read_text(encoding="utf-8").splitlines()):
            record = json.loads(line)
            types[record["id"]] = record["type"]
    return [r for r in rows if with_math or all(types[t] != "math" for t in r["reward_test_ids"])]


def _variant_batch(with_math: bool) -> tuple[list[dict], list[str], dict]:
    rows = _variants(with_math)
    texts = []
    for row in rows:
        with open(PARITY / row["variant_file"], encoding="utf-8", newline="") as fh:
            texts.append(fh.read())
    kwargs = {
        "test_ids": [r["reward_test_ids"] for r in rows],
        "jsonl_file": [str(SAMPLE / r["reward_jsonl_file"]) for r in rows],
    }
    return rows, texts, kwargs


@pytest.mark.skipif(not PARITY.is_dir(), reason="parity-dev fixtures not present")
@pytest.mark.parametrize("with_math", [False, pytest.param(True, marks=[
    pytest.mark.browser, pytest.mark.skipif(not HAS_MATH, reason="KaTeX math checker not built yet")])])
def test_parity_with_olmocr_reward(scorer_reward, with_math):
    """With the short-answer guard off, bench_reward / bench_macro_reward equal olmOCR's micro and
    macro rewards on the parity variants."""
    rows, texts, kwargs = _variant_batch(with_math)
    assert len(rows) > 300
    micro, macro = scorer_reward
    got_micro = micro(prompts=[None] * len(rows), completions=texts, **kwargs)
    got_macro = macro(prompts=[None] * len(rows), completions=texts, **kwargs)
    bad = [
        (r["variant_id"], r["reward_micro"], m, r["reward_macro"], a)
        for r, m, a in zip(rows, got_micro, got_macro, strict=True)
        if abs(m - r["reward_micro"]) > 1e-9 or abs(a - r["reward_macro"]) > 1e-9
    ]
    assert not bad, f"{len(bad)} of {len(rows)} variants differ, e.g. {bad[:5]}"


@pytest.mark.skipif(not PARITY.is_dir(), reason="parity-dev fixtures not present")
def test_short_answer_guard_lowers_only_the_near_empty_parity_variants():
    """With the guard on (the default), the reward differs from olmOCR's only on variants whose text
    is near-empty (the fixtures' `blank` operator leaves "\n" or a few spaces, which olmOCR rewards
    with up to 1.0: olmocr #461), and only downwards, to what an empty answer earns."""
    rows, texts, kwargs = _variant_batch(False)
    with BenchReward(average="micro", processes=1) as guarded, \
            BenchReward(average="micro", processes=1, short_answer_guard=False) as reference:
        got, ref = (r(prompts=[None] * len(rows), completions=texts, **kwargs) for r in (guarded, reference))
        empty = reference(prompts=[None] * len(rows), completions=[""] * len(rows), **kwargs)
    assert ref == [r["reward_micro"] for r in rows]
    changed = [i for i in range(len(rows)) if got[i] != ref[i]]
    assert changed, "the parity variants hold near-empty answers the reference rewards"
    assert all(got[i] < ref[i] for i in changed)
    assert all(rows[i]["n_chars"] <= 4 and not texts[i].strip() for i in changed), [rows[i]["variant_id"] for i in changed]
    assert all(got[i] == empty[i] for i in changed)


def test_conversational_completions_and_metrics(scorer_reward):
    """Conversational completions score like plain ones; pass rates, timeouts, verdicts are logged."""
    micro, _ = scorer_reward
    ids = _earnings_ids()
    page = (SAMPLE / "olmocr_pipeline" / "earnings_pg1_repeat1.md").read_text(encoding="utf-8")
    metrics, extra = {}, {}
    rewards = micro(
        prompts=[None, None],
        completions=[[{"role": "assistant", "content": page}], page],
        test_ids=[ids, ids], test_files=[[str(SAMPLE / "dataset.jsonl")] * len(ids)] * 2,
        pdf=["earnings.pdf"] * 2, page=[1, 1],
        log_metric=lambda k, v: metrics.setdefault(k, v),
        log_extra=lambda k, v: extra.setdefault(k, v),
    )
    assert rewards[0] == rewards[1] > 0
    assert metrics["bench/timeouts"] == 0 and metrics["bench/errors"] == 0
    assert "bench/pass_rate/type/table" in metrics and "bench/pass_rate/jsonl/dataset.jsonl" in metrics
    verdicts = json.loads(extra["bench_verdicts"][0])
    assert {v["id"] for v in verdicts} == set(ids) and extra["page_id"] == ["earnings.pdf#1"] * 2


def test_filters_and_rows_without_tests(tmp_path):
    """Type and JSONL filters remove tests; a row left without tests scores None (TRL skips it)."""
    ids = _earnings_ids()
    files = [str(SAMPLE / "dataset.jsonl")] * len(ids)
    reward = BenchReward(types=["present"], processes=0)
    assert reward.tests_for(ids, files) == []  # earnings has only table tests
    assert reward(completions=["x"], test_ids=[ids], test_files=[files]) == [None]
    kept = BenchReward(jsonl_regex="DATA", processes=0).tests_for(ids, files)
    assert len(kept) == len(ids)
    assert BenchReward(jsonl_regex="^blanks", processes=0).tests_for(ids, files) == []
    assert BenchReward(processes=0)(completions=["x"], test_ids=[[]], test_files=[[]]) == [None]
    with pytest.raises(TestLookupError, match="not in"):
        BenchReward(processes=0).tests_for(["no_such_test"], [files[0]])
    with pytest.raises(TestLookupError, match="cannot be read"):
        BenchReward(processes=0).tests_for(["x"], [str(tmp_path / "missing.jsonl")])


def test_hostile_completions_return_within_the_time_bound():
    """1 MB of text, a 10,000-fold repetition, binary noise and None never crash or stall the reward."""
    ids = _earnings_ids()
    files = [str(SAMPLE / "dataset.jsonl")] * len(ids)
    noise = bytes(range(256)) * 4096
    completions = [
        "word " * 200_000,                                  # 1 MB
        "<table><tr><td>62</td></tr></table>" * 10_000,     # repetition loop with tables
        noise.decode("latin-1"),                            # binary noise as text
        noise,                                              # raw bytes
        None,
    ]
    timeout_s = 2.0
    with BenchReward(processes=1, timeout_s=timeout_s) as reward:
        reward(completions=["warm up"], test_ids=[ids], test_files=[files])  # worker start-up
        metrics = {}
        start = time.monotonic()
        rewards = reward(completions=completions, test_ids=[ids] * 5, test_files=[files] * 5,
                         log_metric=lambda k, v: metrics.setdefault(k, v))
        elapsed = time.monotonic() - start
    assert len(rewards) == 5 and all(isinstance(r, float) and 0.0 <= r <= 1.0 for r in rewards)
    assert rewards[4] == 0.0 and metrics["bench/errors"] >= 1
    grace = 2.0 + 3.0  # BenchScorer's kill grace + process replacement
    assert elapsed < len(completions) * (timeout_s + grace)


def test_picklable_with_names():
    """Parameterised rewards pickle (worker pools stay behind) and keep names ending in _reward."""
    rewards = [BenchReward(average="macro", types=["table"], jsonl_regex="data"), EosReward([5]),
               EditDistanceReward(), MedoidReward()]
    for reward in rewards:
        copy = pickle.loads(pickle.dumps(reward))
        assert copy.__name__ == reward.__name__ and copy.__name__.endswith("_reward")
    assert pickle.loads(pickle.dumps(rewards[0])).tests_for(_earnings_ids()[:1], [str(SAMPLE / "dataset.jsonl")])
    for func in (front_matter_reward, element_count_reward, rect_tables_reward, bench_reward):
        assert func.__name__.endswith("_reward") and pickle.loads(pickle.dumps(func)) is func


def test_shared_pool_survives_pickling_and_stays_with_its_owner():
    """Micro and macro pickled together still share one (not yet started) pool; closing the reward
    that borrows it leaves it running, closing its owner stops it."""
    micro = BenchReward(processes=0)
    macro = BenchReward(average="macro", processes=0, share_scoring_with=micro)
    pool = micro.scorer()
    copy_micro, copy_macro = pickle.loads(pickle.dumps([micro, macro]))
    assert copy_macro._pool is copy_micro._pool is not micro._pool and copy_micro._pool._scorer is None
    macro.close()
    assert micro.scorer() is pool
    micro.close()
    assert micro.scorer() is not pool
    micro.close()


def test_eos_reward():
    reward = EosReward([7, 9])
    assert reward(completions=["a", "b", "c", "d"], completion_ids=[[1, 7], [9], [1, 2], []]) == [1.0, 1.0, 0.0, 0.0]
    assert reward(completions=["a"]) == [None]

    class Tok:
        eos_token_id = 3

    class Proc:
        tokenizer = Tok()

    assert EosReward.for_tokenizer(Proc()).eos_token_ids == {3}


def test_front_matter_reward():
    ok = FM + "Hello"
    other = ok.replace("is_table: False", "is_table: True").replace("en", "de")
    out = front_matter_reward(completions=[ok, ok, other, "Hello", FM.replace("0\n", "45\n"), None, b"\xff"],
                              reference=[ok, None, ok, ok, ok, ok, None])
    assert out == [1.0, 0.5, 0.8, 0.0, 0.0, 0.0, 0.0]


def test_reference_rewards():
    ref = FM + "<table><tr><td>a</td></tr></table> $$x$$ text"
    assert EditDistanceReward()(completions=[ref, "zzz", "x"], reference=[ref, ref, None])[0] == 1.0
    assert EditDistanceReward()(completions=["zzz"], reference=[ref])[0] < 0.3
    assert element_count_reward(completions=[ref, "$$y$$", ""], reference=[ref, ref, None]) == [1.0, 0.5, None]
    assert table_is_rectangular("<table><tr><td rowspan=2>a</td><td>b</td></tr><tr><td>c</td></tr></table>")
    assert not table_is_rectangular("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>")
    assert rect_tables_reward(completions=["no table", "<table><tr><td>a</td></tr></table>" * 2]) == [1.0, 1.0]


def test_medoid_reward_groups_by_page():
    reward = MedoidReward()
    out = reward(completions=["abc", "abc", "abd", "zzzz", "zzzz"], pdf=["a", "a", "a", "b", "b"], page=[1] * 5)
    assert out[0] == 1.0 and out[1] == 1.0 and 0 < out[2] < 1 and out[3] == out[4] == 1.0
    huge = ["x" * 1_000_000, "y" * 1_000_000]
    start = time.monotonic()
    assert len(reward(completions=huge)) == 2 and time.monotonic() - start < 5


def _pairwise_medoid(texts: list[str]) -> list[float]:
    """The medoid rewards as the reward computed them before probe F12 (O(k^3): every member scanned every pair)."""
    from rapidfuzz.distance import Levenshtein

    members = list(range(len(texts)))
    if len(members) == 1:
        return [1.0]
    dist = {(a, b): Levenshtein.normalized_distance(texts[a], texts[b]) for i, a in enumerate(members)
            for b in members[i + 1:]}
    total = {m: sum(d for pair, d in dist.items() if m in pair) for m in members}
    medoid = min(members, key=lambda m: (total[m], m))
    return [1.0 if m == medoid else 1.0 - dist[(min(m, medoid), max(m, medoid))] for m in members]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab \né", max_size=12), min_size=1, max_size=30), st.data())
def test_medoid_rewards_are_the_pairwise_loops_bit_for_bit(texts, data):
    """The O(k^2) medoid (probe F12) gives the old loop's rewards exactly, near ties and duplicates
    included (the sums are added in the same order); benchmarks/medoid.py measures the speed."""
    assert medoid_agreement(texts) == _pairwise_medoid(texts)
    pages = data.draw(st.lists(st.integers(0, 2), min_size=len(texts), max_size=len(texts)))
    got = MedoidReward()(completions=texts, pdf=["p.pdf"] * len(texts), page=pages)
    page_texts = [_page_text(t) or "" for t in texts]
    for page in set(pages):
        members = [i for i, p in enumerate(pages) if p == page]
        assert [got[i] for i in members] == _pairwise_medoid([page_texts[i] for i in members])


def test_text_helpers():
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"}]}]) == "a"
    assert completion_text(None) is None and completion_text(42) is None
    assert scored_text(FM + "Body", "page_text") == "Body" and scored_text(FM + "Body", "full") == FM + "Body"
    with pytest.raises(ValueError):
        scored_text("x", "other")


def test_build_rewards_from_config():
    cfg = load_config()

    class Tok:
        eos_token_id = 3

    rewards = build_rewards(cfg["rewards"], tokenizer=Tok())
    assert rewards.names == ["bench_reward", "front_matter_reward", "eos_reward"]
    assert rewards.weights == [1.0, 1.0, 1.0]
    cfg["rewards"]["weights"].update(bench=None, bench_macro=0.5, medoid=0.0, eos=None, front_matter=None)
    rewards = build_rewards(cfg["rewards"])
    assert rewards.names == ["bench_macro_reward", "medoid_reward"] and rewards.weights == [0.5, 0.0]
    assert rewards.funcs[0].log_details
    cfg["rewards"]["weights"] = {k: None for k in cfg["rewards"]["weights"]}
    with pytest.raises(ValueError, match="selects no reward"):
        build_rewards(cfg["rewards"])


def test_every_registered_reward_builds_under_its_name():
    """Each rewards.weights key builds the reward logged as <key>_reward, in registry order, with its
    weight and config; an unknown key is named in the error."""
    cfg = load_config()

    class Tok:
        eos_token_id = 3

    assert REWARD_NAMES == tuple(cfg["rewards"]["weights"]) == ("bench", "bench_macro", "front_matter", "eos",
                                                                "edit_distance", "element_count", "rect_tables",
                                                                "medoid")
    cfg["rewards"]["weights"] = {name: float(i) for i, name in enumerate(REWARD_NAMES)}
    cfg["rewards"].update(max_chars=123, score_text="page_text")
    cfg["rewards"]["bench"].update(types=["table"], jsonl_regex="data", processes=0, timeout_s=3, memory_mb=100,
                                   short_answer_guard=False, short_signal={"length_share": 0.5, "min_reward": 0.9})
    rewards = build_rewards(cfg["rewards"], tokenizer=Tok(), extra_eos_ids=[4])
    assert rewards.names == [f"{name}_reward" for name in REWARD_NAMES]
    assert rewards.weights == [float(i) for i in range(len(REWARD_NAMES))]
    micro, macro, front_matter, eos, edit, elements, rect, medoid = rewards.funcs
    assert (micro.average, macro.average) == ("micro", "macro") and micro.log_details and not macro.log_details
    for bench in (micro, macro):
        assert (bench.types, bench.jsonl_regex, bench.score_text) == ({"table"}, "data", "page_text")
        assert (bench.processes, bench.timeout_s, bench.memory_mb) == (0, 3.0, 100.0)
        assert (bench.short_answer_guard, bench.short_length_share, bench.short_min_reward) == (False, 0.5, 0.9)
    assert macro.scorer() is micro.scorer()
    assert (front_matter, elements, rect) == (front_matter_reward, element_count_reward, rect_tables_reward)
    assert eos.eos_token_ids == {3, 4} and edit.max_chars == medoid.max_chars == 123
    rewards.close()
    cfg["rewards"]["weights"]["eos"] = None
    assert "eos_reward" not in build_rewards(cfg["rewards"]).names
    cfg["rewards"]["weights"]["eos"] = 1.0
    with pytest.raises(ValueError, match="no tokenizer"):
        build_rewards(cfg["rewards"])
    cfg["rewards"]["weights"]["bench_micro"] = 1.0
    with pytest.raises(ValueError, match=r"unknown reward\(s\) \['bench_micro'\]"):
        build_rewards(cfg["rewards"], tokenizer=Tok())


def test_micro_and_macro_together_score_each_batch_once():
    """With bench and bench_macro both selected, one pool scores each completion once for both."""
    cfg = load_config()
    cfg["rewards"]["weights"].update(bench=1.0, bench_macro=1.0, front_matter=None, eos=None)
    cfg["rewards"]["bench"]["processes"] = 0
    micro, macro = build_rewards(cfg["rewards"]).funcs
    assert macro.scorer() is micro.scorer()
    calls = []
    real_score = micro.scorer().score
    micro.scorer().score = lambda jobs: calls.append(len(jobs)) or real_score(jobs)
    ids = _earnings_ids()
    text = (SAMPLE / "olmocr_pipeline" / "earnings_pg1_repeat1.md").read_text(encoding="utf-8")
    kwargs = {"test_ids": [ids, ids], "test_files": [[str(SAMPLE / "dataset.jsonl")] * len(ids)] * 2}
    completions = [text, text[: len(text) // 2]]
    got_micro, got_macro = micro(completions=completions, **kwargs), macro(completions=completions, **kwargs)
    assert calls == [2]  # the macro reward reused the micro reward's verdicts
    with BenchReward(average="macro", processes=0) as alone:
        assert got_macro == alone(completions=completions, **kwargs)
    with BenchReward(average="micro", processes=0) as alone:
        assert got_micro == alone(completions=completions, **kwargs)
    micro(completions=completions[:1], **{k: v[:1] for k, v in kwargs.items()})
    assert calls == [2, 1]  # a different batch is scored again
    micro.close()


# ------------------------------------------------------------ rewards that parse tables are bounded
def _plain_is_rectangular(table_html: str) -> bool:
    """The grid expansion :func:`table_is_rectangular` replaced (one set entry per covered cell)."""
    import lxml.html

    from olmpipe.rewards.reference import _span

    try:
        root = lxml.html.fragment_fromstring(table_html, create_parent=False)
    except Exception:  # noqa: BLE001
        return False
    occupied: dict[int, set[int]] = {}
    rows = list(root.iter("tr"))
    for r, tr in enumerate(rows):
        c = 0
        for cell in tr:
            if cell.tag not in ("td", "th"):
                continue
            while c in occupied.setdefault(r, set()):
                c += 1
            rowspan, colspan = _span(cell.get("rowspan")), _span(cell.get("colspan"))
            for dr in range(rowspan):
                occupied.setdefault(r + dr, set()).update(range(c, c + colspan))
            c += colspan
    grid = [occupied.get(r, set()) for r in range(len(rows))]
    if not grid or not any(grid):
        return False
    width = max(max(cols) + 1 for cols in grid if cols)
    return all(cols == set(range(width)) for cols in grid)


RECT_SPAN = st.sampled_from(["", "", "", " rowspan=2", " rowspan=3", " colspan=2", " colspan=3", " rowspan=2 colspan=2",
                             " rowspan=0", " colspan=-1", " colspan=x", " rowspan=5000"])


@st.composite
def rect_candidates(draw):
    rows = draw(st.lists(st.lists(st.tuples(st.sampled_from(["td", "th"]), RECT_SPAN), max_size=4), max_size=5))
    body = "".join("<tr>" + "".join(f"<{t}{s}>x</{t}>" for t, s in row) + "</tr>" for row in rows)
    return f"<table>{body}</table>"


@settings(max_examples=400, deadline=None)
@given(rect_candidates())
def test_rectangular_check_equals_the_grid_expansion(table_html):
    assert table_is_rectangular(table_html) == _plain_is_rectangular(table_html)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<table>", "<TABLE border=1>", "</table>", "</table >", "<tablex>", "x", ">",
                                 "$$", "$", "\\(", "\\)", "\\[", "\\]", "a\nb"]), max_size=30).map("".join))
def test_element_scans_equal_the_regular_expressions(text):
    import re

    from olmpipe.rewards.reference import count_elements, find_tables

    tables = re.findall(r"<table\b[^>]*>.*?</table\s*>", text, re.IGNORECASE | re.DOTALL)
    maths = sum(len(re.findall(p, text, re.DOTALL)) for p in (r"\$\$(.+?)\$\$", r"\\\((.+?)\\\)", r"\\\[(.+?)\\\]"))
    assert find_tables(text) == tables and count_elements(text) == (len(tables), maths)


def hostile_table_pages() -> list[str]:
    """~2 MB pages: spans the old grid expansion filled cell by cell (it took 7 GB at 6 KB),
    60,000 small tables, and unclosed tags and delimiters a lazy regular expression rescans."""
    return ["<table>" + "<tr><td rowspan=1000 colspan=1000>x</td></tr>" * 47_000 + "</table>",
            "<table><tr>" + "<td rowspan=1000>x</td>" * 90_000 + "</tr>" + "<tr></tr>" * 5_000 + "</table>",
            "<table><tr><td>1</td></tr></table>" * 60_000,
            "<table>" * 250_000, "\\(" * 500_000, "<table><tr>" * 180_000]


def test_table_rewards_on_span_heavy_pages_are_bounded_in_the_training_process():
    """rect_tables and element_count run in the trainer: on the 2 MB hostile pages a fresh process
    computing both peaks under 400 MB RSS (measured ~170 MB) and gives the expected values."""
    import os
    import subprocess
    import sys

    code = (f"import json, resource, sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from test_rewards import hostile_table_pages\n"
            "from olmpipe.rewards import element_count_reward, rect_tables_reward\n"
            "pages = hostile_table_pages()\n"
            "out = [rect_tables_reward(completions=pages), element_count_reward(completions=pages, reference=['x'] * 6)]\n"
            "hwm = next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
                "print(json.dumps([*out, hwm]))\n")  # VmHWM: ru_maxrss would include the forked runner's RSS
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rect, counts, peak_kb = json.loads(done.stdout.splitlines()[-1])
    assert rect == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0] and counts == [0.5, 0.5, 0.5, 1.0, 1.0, 1.0]
    assert peak_kb < 400 * 1024


def test_rows_whose_tests_cannot_be_found_score_none_and_count_as_errors(tmp_path, caplog):
    """No test_files column, an unknown id, a missing or malformed file, ids given as a string:
    None for those rows (never an exception into the trainer), counted in bench/errors, logged."""
    ids = _earnings_ids()
    files = [str(SAMPLE / "dataset.jsonl")] * len(ids)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"pdf": "a.pdf", "page": 1, "id": "x", "type": "present"}\n')
    rows = [(ids, None), (["no_such_test"], [files[0]]), (["x"], [str(tmp_path / "missing.jsonl")]),
            (["x"], [str(bad)]), (ids[0], files[0]), (ids, files)]
    metrics: dict[str, float] = {}
    extra: dict[str, list] = {}
    reward = BenchReward(processes=0)
    caplog.set_level("WARNING", logger="olmpipe.rewards.bench")
    out = reward(completions=["x"] * len(rows), test_ids=[r[0] for r in rows], test_files=[r[1] for r in rows],
                 log_metric=metrics.__setitem__, log_extra=extra.__setitem__)
    assert out[:5] == [None] * 5 and isinstance(out[5], float)
    assert metrics["bench/errors"] == 5 and metrics["bench/completions"] == 1
    assert "row 0 scores None" in caplog.text and "5 of 6 rows" in caplog.text
    reasons = [json.loads(d)["error"] for d in extra["bench_verdicts"][:5]]
    assert ["neither a 'test_files'" in reasons[0], "is not in" in reasons[1], "cannot be read" in reasons[2],
            "cannot be loaded" in reasons[3], "is a string" in reasons[4]] == [True] * 5
    assert reward(completions=["x", "y"], test_ids="ab", test_files=files[:2]) == [None, None]  # a string column


# ---------------------------------------------------------------- the short-answer guard (olmocr #461)
SENTENCES = [
    "The committee approved the annual budget after a long debate",
    "The treasurer presented the audited accounts for the year",
    "The next meeting will take place in the town hall",
    "The minutes were read and approved without amendment",
]
HEADER = "ACME QUARTERLY REPORT PAGE 3"
#: A real page's transcription: every sentence, two of them with an OCR error, and the running header.
PAGE_ANSWER = (FM + f"{HEADER}\n\n# Minutes\n\n{SENTENCES[0]}. {SENTENCES[1].replace('audited', 'audlted')}. "
               f"{SENTENCES[2].replace('meeting', 'rneeting')}. {SENTENCES[3]}.\n")


def _page_bench(tmp_path: Path, pages: int = 2) -> tuple[list[list[str]], list[list[str]]]:
    """Test files of ``pages`` pages, each with the three present sentences and an absent header test."""
    rows, ids = [], []
    for p in range(1, pages + 1):
        page_ids = [f"p{p}_{k}" for k in range(len(SENTENCES))] + [f"p{p}_header"]
        rows += [{"pdf": "minutes.pdf", "page": p, "id": i, "type": "present", "text": t}
                 for i, t in zip(page_ids, SENTENCES, strict=False)]
        rows.append({"pdf": "minutes.pdf", "page": p, "id": page_ids[-1], "type": "absent", "text": HEADER})
        ids.append(page_ids)
    path = tmp_path / "minutes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return ids, [[str(path)] * len(i) for i in ids]


@pytest.mark.parametrize("answer", [" ", "e", "\n", "The", "approved"])
def test_the_training_reward_guards_the_five_answers_by_default(tmp_path, answer):
    """Issue 29's five answers pass the present test in olmOCR-Bench; the training reward (the guard
    on by default in the config) gives them nothing, and a real answer still everything."""
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"pdf": "a.pdf", "page": 1, "id": "t", "type": "present", "text": SENTENCES[0]}) + "\n")
    cfg = load_config()
    assert cfg["rewards"]["bench"]["short_answer_guard"] is True
    cfg["rewards"]["weights"].update(front_matter=None, eos=None)
    rewards = build_rewards(cfg["rewards"])
    (guarded,) = rewards.funcs
    kwargs = {"test_ids": [["t"]] * 2, "test_files": [[str(path)]] * 2}
    try:
        assert guarded(completions=[answer, PAGE_ANSWER], **kwargs) == [0.0, 1.0]
        with BenchReward(processes=0, short_answer_guard=False) as reference:
            assert reference(completions=[answer, PAGE_ANSWER], **kwargs) == [1.0, 1.0]
    finally:
        rewards.close()


class _Tok:
    eos_token_id = 7


def _policy_rewards(policy, ids, files, *, guard: bool) -> tuple[float, dict[str, list[float]]]:
    """Mean total reward (TRL's weighted sum, the config's default rewards: bench, front matter, EOS)
    of a scripted policy answering G = 4 completions per page, and the metrics the rewards logged."""
    cfg = load_config()
    cfg["rewards"]["bench"].update(short_answer_guard=guard, processes=0)
    rewards = build_rewards(cfg["rewards"], tokenizer=_Tok())
    group = 4
    rows = [(page, policy(page)) for page in range(len(ids)) for _ in range(group)]
    logged: dict[str, list[float]] = {}
    kwargs = {
        "prompts": [None] * len(rows),
        "completions": [[{"role": "assistant", "content": text}] for _, text in rows],
        "completion_ids": [[1, 2, _Tok.eos_token_id]] * len(rows),  # every answer ends on EOS
        "test_ids": [ids[page] for page, _ in rows], "test_files": [files[page] for page, _ in rows],
        "log_metric": lambda name, value: logged.setdefault(name, []).append(value),
    }
    try:
        per_func = [func(**kwargs) for func in rewards.funcs]
    finally:
        rewards.close()
    totals = [sum(w * values[i] for w, values in zip(rewards.weights, per_func, strict=True)) for i in range(len(rows))]
    return sum(totals) / len(totals), logged


def test_a_one_word_policy_earns_less_than_the_page_with_the_guard_and_more_without(tmp_path):
    """The bug, reproduced and fixed: answering every page with "The" earns more than transcribing
    it under olmOCR-Bench's semantics (all four sentences contain "The" and the header is absent:
    every test passes; the transcription has two OCR errors and keeps the running header, and its
    front matter earns 0.5 that "The" does not), and less with the short-answer guard. The training
    signal shows the one-word policy either way.

    (Front matter plus "The" is scored as a 120-character text with rewards.score_text: full, longer
    than these sentences: partial_ratio then aligns each sentence inside it, and it fails; the
    validate stage's audit measures both answers on a real bench.)"""
    ids, files = _page_bench(tmp_path)
    one_word, page = (lambda _: "The"), (lambda _: PAGE_ANSWER)
    word_off, word_off_metrics = _policy_rewards(one_word, ids, files, guard=False)
    page_off, page_off_metrics = _policy_rewards(page, ids, files, guard=False)
    word_on, word_on_metrics = _policy_rewards(one_word, ids, files, guard=True)
    page_on, _ = _policy_rewards(page, ids, files, guard=True)
    assert word_off > page_off  # olmOCR-Bench's reward: writing less earns more
    assert word_on < page_on  # the guard: it does not
    assert page_on == page_off and word_on < word_off
    assert (word_off, page_off, word_on) == pytest.approx((2.0, 1.9, 1.2))
    # 8 completions x 4 sentences passed through a too-short match, guard or not ...
    assert word_off_metrics["bench/short_passes"] == word_on_metrics["bench/short_passes"] == [32.0]
    # ... and 8 short completions with a high reward without the guard, none with it
    assert word_off_metrics["bench/short_high_reward"] == [8.0] and word_on_metrics["bench/short_high_reward"] == [0.0]
    assert page_off_metrics["bench/short_passes"] == page_off_metrics["bench/short_high_reward"] == [0.0]


def test_short_signal_reads_the_reference_answer_when_there_is_one(tmp_path):
    """With a reference answer the page's length is its page text; without one, the tests' texts.
    An answer that is short against a long reference but holds every test's text is counted."""
    ids, files = _page_bench(tmp_path, pages=1)
    answer = FM + "\n\n".join(SENTENCES)  # passes every present test for real
    reference = FM + "\n\n".join(SENTENCES * 10)  # a page ten times as long
    logged: dict[str, list[float]] = {}
    with BenchReward(processes=0) as reward:
        for ref in (None, reference):
            got = reward(completions=[answer], test_ids=ids, test_files=files, reference=[ref],
                         log_metric=lambda name, value: logged.setdefault(name, []).append(value))
            assert got == [1.0]
    assert logged["bench/short_high_reward"] == [0.0, 1.0] and logged["bench/short_passes"] == [0.0, 0.0]


def test_guarded_verdict_log_names_the_guard(tmp_path):
    ids, files = _page_bench(tmp_path, pages=1)
    extra: dict[str, list] = {}
    with BenchReward(processes=0) as reward:
        reward(completions=["The"], test_ids=ids, test_files=files,
               log_extra=lambda name, values: extra.__setitem__(name, list(values)))
    verdicts = json.loads(extra["bench_verdicts"][0])
    assert [(v["type"], v["passed"], v.get("short", False)) for v in verdicts] == [
        ("present", False, True)] * 4 + [("absent", True, False)]
    assert "short-answer guard" in verdicts[0]["reason"]

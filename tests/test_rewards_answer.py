"""olmpipe.rewards.answer: the front matter reward against olmOCR 0.4.27's, and the EOS reward.

``REWARD_PARITY`` holds olmOCR's own ``reward_front_matter`` (``olmocr/train/grpo_train.py:479-575``
at v0.4.27) on each completion, against each reference answer of ``REFERENCES`` (olmOCR's
``claude_original``; olmpipe's ``reference`` column). The values were produced by running the real
function: ``olmocr==0.4.27`` installed from PyPI with ``--no-deps`` (plus pyyaml 6.0.4) into a
throwaway venv; as ``grpo_train`` imports torch, the ``reward_front_matter`` function was taken
from that file's source with ``ast`` and executed with ``FrontMatterParser``, ``PageResponse`` and a
logger in its namespace, as ``reward_front_matter(None, [completion], claude_original=[ref])``,
also with the completion as ``[{"role": "assistant", "content": completion}]`` (same values). The
values are pasted as olmOCR returns them (it sums 0.1 five times, hence 0.9999999999999999; olmpipe
rounds). The parser's own table (fields and page text) is in tests/test_prompts.py.
"""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from olmpipe.rewards.answer import EosReward, front_matter_reward

H = ("primary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
     "is_table: False\nis_diagram: False\n")
ANSWER = "---\n" + H + "---\nBody text."


def _with(key: str, value: str) -> str:
    """ANSWER with the line of ``key`` set to ``value``."""
    lines = [(f"{key}: {value}" if line.startswith(key + ":") else line) for line in H.splitlines()]
    return "---\n" + "\n".join(lines) + "\n---\nBody text."


#: Reference answers, in the order of the values in REWARD_PARITY.
REFERENCES = [
    ANSWER,  # same fields as ANSWER
    _with("is_table", "True").replace("primary_language: en", "primary_language: de"),  # two differ
    _with("primary_language", "no"),  # olmOCR reads the language as None
    _with("rotation_correction", "false"),  # olmOCR accepts it: False == 0
    "Body text.",  # no front matter: no field bonus
    "",  # empty: no field bonus
    None,  # no reference: no field bonus
]

#: (case, completion, olmOCR's reward against each of REFERENCES)
REWARD_PARITY = [
    ("canonical", ANSWER,
     (0.9999999999999999, 0.7999999999999999, 0.8999999999999999, 0.9999999999999999, 0.5, 0.5, 0.5)),
    ("leading_newline", "\n" + ANSWER, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("crlf", ANSWER.replace("\n", "\r\n"), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("crlf_body_only", "---\n" + H + "---\r\nline one\r\nline two\r\n",
     (0.9999999999999999, 0.7999999999999999, 0.8999999999999999, 0.9999999999999999, 0.5, 0.5, 0.5)),
    ("closing_four_dashes", "---\n" + H + "----\nBody text.",
     (0.9999999999999999, 0.7999999999999999, 0.8999999999999999, 0.9999999999999999, 0.5, 0.5, 0.5)),
    ("no_text_after", "---\n" + H + "---",
     (0.9999999999999999, 0.7999999999999999, 0.8999999999999999, 0.9999999999999999, 0.5, 0.5, 0.5)),
    ("not_closed", "---\n" + H + "Body text.", (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("empty_block", "---\n---\nBody text.", (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("lang_123", _with("primary_language", "123"), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("lang_no", _with("primary_language", "no"),
     (0.8999999999999999, 0.7999999999999999, 0.9999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("lang_quoted_no", _with("primary_language", '"no"'),
     (0.8999999999999999, 0.7999999999999999, 0.8999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("lang_None_word", _with("primary_language", "None"),
     (0.8999999999999999, 0.7999999999999999, 0.8999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("lang_zero", _with("primary_language", "0"),
     (0.8999999999999999, 0.7999999999999999, 0.9999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("lang_empty_list", _with("primary_language", "[]"),
     (0.8999999999999999, 0.7999999999999999, 0.9999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("lang_bad_date", _with("primary_language", "2020-13-45"), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("table_on", _with("is_table", "on"),
     (0.8999999999999999, 0.8999999999999999, 0.7999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("table_maybe", _with("is_table", "maybe"),
     (0.9999999999999999, 0.7999999999999999, 0.8999999999999999, 0.9999999999999999, 0.5, 0.5, 0.5)),
    ("table_one", _with("is_table", "1"), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("rotation_valid_false", _with("is_rotation_valid", "false"),
     (0.8999999999999999, 0.7, 0.7999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("diagram_true", _with("is_diagram", "true"),
     (0.8999999999999999, 0.7, 0.7999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("rot_90", _with("rotation_correction", "90"),
     (0.8999999999999999, 0.7, 0.7999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("rot_float", _with("rotation_correction", "90.0"), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("rot_false", _with("rotation_correction", "false"),
     (0.9999999999999999, 0.7999999999999999, 0.8999999999999999, 0.9999999999999999, 0.5, 0.5, 0.5)),
    ("rot_true", _with("rotation_correction", "true"), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("rot_hex", _with("rotation_correction", "0x5A"),
     (0.8999999999999999, 0.7, 0.7999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("extra_key", "---\n" + H + "color: red\n---\nBody text.", (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("duplicate_key", "---\n" + H + "is_table: True\n---\nBody text.",
     (0.8999999999999999, 0.8999999999999999, 0.7999999999999999, 0.8999999999999999, 0.5, 0.5, 0.5)),
    ("invalid_yaml", "---\nprimary_language: [en\n---\nBody text.", (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("scalar_block", ("---\nprimary_language is_rotation_valid rotation_correction is_table is_diagram\n"
                     "---\nBody text."),
     (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
]


@pytest.mark.parametrize(("completion", "expected"), [c[1:] for c in REWARD_PARITY],
                         ids=[c[0] for c in REWARD_PARITY])
def test_front_matter_reward_matches_olmocr(completion, expected):
    n = len(REFERENCES)
    got = front_matter_reward(completions=[completion] * n, reference=REFERENCES)
    assert got == pytest.approx(list(expected), abs=1e-9)
    conversational = [[{"role": "assistant", "content": completion}]] * n
    assert front_matter_reward(completions=conversational, reference=REFERENCES) == got


def test_front_matter_reward_values_are_exact_tenths():
    """0.5 + 0.1 per matching field, as exact decimals (olmOCR's running sum drifts by 1e-16)."""
    completions = [ANSWER, _with("is_diagram", "True"), _with("is_table", "True").replace(": 0\n", ": 90\n"),
                   REFERENCES[1].replace("is_diagram: False", "is_diagram: True")]
    others = [_with("primary_language", "de"), _with("is_rotation_valid", "False")]
    assert front_matter_reward(completions=completions + others, reference=[ANSWER] * 6) == [
        1.0, 0.9, 0.8, 0.7, 0.9, 0.9]
    assert front_matter_reward(completions=[REFERENCES[1]], reference=[_with("is_diagram", "True")]) == [0.7]


def test_front_matter_reward_odd_columns_and_completions(caplog):
    """Missing, short or malformed inputs give rewards, not exceptions; bad references are logged."""
    assert front_matter_reward(completions=[ANSWER, ANSWER]) == [0.5, 0.5]
    assert front_matter_reward(completions=[ANSWER, ANSWER], reference=[ANSWER]) == [1.0, 0.5]
    assert front_matter_reward(completions=[ANSWER], reference=5) == [0.5]
    assert front_matter_reward(completions=[ANSWER] * 3, reference=[[ANSWER], {"x": 1}, ANSWER.encode()]) == [0.5] * 3
    assert front_matter_reward(completions=[None, [], [{"role": "assistant"}], 3, ANSWER.encode()],
                               reference=[ANSWER] * 5) == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert front_matter_reward(completions=[]) == []
    with caplog.at_level(logging.WARNING, logger="olmpipe.rewards.answer"):
        assert front_matter_reward(completions=[ANSWER] * 3, reference=["no front matter"] * 3) == [0.5] * 3
    assert "of 3 completions has no front matter" in caplog.text


_JUNK = st.recursive(
    st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=30), st.binary(max_size=10),
              st.sampled_from([ANSWER, "\n" + ANSWER, ANSWER[:40]])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["role", "content"]), inner)),
    max_leaves=8,
)


@given(completions=st.lists(_JUNK, max_size=4), reference=st.one_of(_JUNK, st.lists(_JUNK, max_size=4)))
def test_front_matter_reward_never_raises(completions, reference):
    out = front_matter_reward(completions=completions, reference=reference)
    assert len(out) == len(completions) and all(r in (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0) for r in out)


def test_eos_reward_scores_last_token():
    reward = EosReward([7, 9])
    ids = [[1, 7], [9], [1, 2], [], np.array([3, 7]), torch.tensor([3, 9]), (4, np.int64(7))]
    assert reward(completions=["x"] * 7, completion_ids=ids) == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert reward(completions=["a"]) == [None]
    assert reward(completion_ids=[[7]]) == [1.0]


def test_eos_reward_non_integer_ids_score_none_counted_and_logged(caplog):
    """Non-integer token ids give None for that completion, one eos/errors count each, and a warning."""
    reward = EosReward([7])
    metrics: dict[str, float] = {}
    ids = [[1, 7], [1, "7"], [1, 7.0], "17", 7, b"\x01\x07", [None], [1, 7]]
    with caplog.at_level(logging.WARNING, logger="olmpipe.rewards.answer"):
        out = reward(completions=["x"] * len(ids), completion_ids=ids, log_metric=metrics.__setitem__)
    assert out == [1.0, None, None, None, None, None, None, 1.0]
    assert metrics == {"eos/errors": 6.0}
    assert "6 bad completion_ids of 8" in caplog.text and "completion 1" in caplog.text
    metrics.clear()
    assert reward(completions=["x", "y"], completion_ids=7, log_metric=metrics.__setitem__) == [None, None]
    assert metrics == {"eos/errors": 1.0}
    assert reward(completions=["x"], completion_ids=[[7]], log_metric=metrics.__setitem__) == [1.0]
    assert metrics == {"eos/errors": 0.0}


@given(st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=3),
                          st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=2), st.none()),
                                   max_size=3)), max_size=5))
def test_eos_reward_never_raises(ids):
    out = EosReward([7])(completions=["x"] * len(ids), completion_ids=ids)
    assert len(out) == len(ids) and all(r in (None, 0.0, 1.0) for r in out)


def test_eos_reward_pickles_and_builds_from_tokenizer():
    class Tok:
        eos_token_id = 3

    class Proc:
        tokenizer = Tok()

    reward = EosReward.for_tokenizer(Proc(), extra_ids=[5])
    assert reward.eos_token_ids == {3, 5}
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.__name__ == "eos_reward" and copy(completion_ids=[[5], [4]]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="at least one EOS"):
        EosReward([])


def _alias_bomb(levels: int) -> str:
    """An answer whose ``primary_language`` is ``levels`` levels of nine YAML aliases each (9**levels values)."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    lines += [f"primary_language: *l{levels - 1}", "is_rotation_valid: True", "rotation_correction: 0",
              "is_table: False", "is_diagram: False"]
    return "---\n" + "\n".join(lines) + "\n---\nHello"


@pytest.mark.parametrize("levels", [5, 9])
def test_front_matter_reward_refuses_a_yaml_alias_bomb(levels):
    """Issue 20 item 4: nine levels of aliases (584 characters, 9**9 values) took 44 s and 3.6 GB
    before raising MemoryError (the ``repr`` of the expanded value in an error message); five levels
    (59,049 values) took ~0.2 s. Both are refused before any value is built, in well under 1 MB."""
    import tracemalloc

    from olmpipe.prompts import MAX_FRONT_MATTER_NODES, parse_page_output

    answer = _alias_bomb(levels)
    tracemalloc.start()
    try:
        assert front_matter_reward(completions=[answer], reference=[answer]) == [0.0]
        parsed = parse_page_output(answer)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert parsed.error.startswith(f"front matter has more than {MAX_FRONT_MATTER_NODES} YAML values")
    assert parsed.text == "Hello"
    assert peak < 1_000_000, peak

"""olmpipe.prompts: the olmOCR v4 YAML prompt, chat messages and the front matter parser.

``PARITY`` holds, for each answer, what olmOCR 0.4.27's parser makes of it: the ``PageResponse``
fields (None: it raises) and its ``natural_text``. The values were produced by running the real
parser, not by reading its code: ``olmocr==0.4.27`` installed from PyPI with ``--no-deps`` (plus
pyyaml 6.0.4) into a throwaway venv, then for each answer::

    parser = FrontMatterParser(front_matter_class=PageResponse)   # olmocr.train.front_matter
    front, text = parser._extract_front_matter_and_text(answer)   # as olmocr/pipeline.py:210-212
    response = parser._parse_front_matter(front, text)            # any exception: invalid

and the values pasted here; olmOCR is not needed to run these tests. The front matter reward's own
table (same cases, reward values) is in tests/test_rewards_answer.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olmpipe.prompts import (
    MAX_FRONT_MATTER_BRACKETS,
    MAX_FRONT_MATTER_CHARS,
    PROMPT_V4_YAML,
    FrontMatter,
    build_messages,
    build_prompt,
    format_page_output,
    openai_content,
    parse_front_matter,
    parse_page_output,
)

GOOD = """---
primary_language: en
is_rotation_valid: True
rotation_correction: 0
is_table: False
is_diagram: False
---
# Title

Some text.
"""


def test_prompt_is_olmocr_v4_text():
    assert build_prompt() == PROMPT_V4_YAML
    assert PROMPT_V4_YAML.startswith("Attached is one page of a document that you must process.")
    assert "Convert equations to LateX and tables to HTML." in PROMPT_V4_YAML
    assert "(page_startx_starty_width_height.png)" in PROMPT_V4_YAML
    assert PROMPT_V4_YAML.endswith(
        "is_rotation_valid, rotation_correction, is_table, and is_diagram parameters."
    )


def test_messages_text_first_then_image_placeholder():
    messages = build_messages()
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": PROMPT_V4_YAML}, {"type": "image"}]}
    ]
    messages[0]["content"].pop()  # a fresh list each call
    assert len(build_messages()[0]["content"]) == 2


def test_messages_with_image_and_trl_placeholder_filling():
    from PIL import Image
    from trl.data_utils import prepare_multimodal_messages

    image = Image.new("RGB", (8, 8))
    assert build_messages(image)[0]["content"][1] == {"type": "image", "image": image}
    filled = prepare_multimodal_messages(build_messages(), images=[image])
    assert filled == build_messages(image)


def test_messages_render_with_tiny_model_chat_template(tiny_model_dir):
    from PIL import Image

    from olmpipe.models.load import load_processor

    processor = load_processor(tiny_model_dir)
    text = processor.apply_chat_template(
        build_messages(Image.new("RGB", (28, 28))), tokenize=False, add_generation_prompt=True
    )
    assert text.index("Attached is one page") < text.index("<|vision_start|>")
    assert text.endswith("<|im_start|>assistant\n")


def test_openai_content_is_text_then_data_url():
    content = openai_content("QUJD")
    assert content[0] == {"type": "text", "text": PROMPT_V4_YAML}
    assert content[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}


def test_parse_well_formed():
    out = parse_page_output(GOOD)
    assert out.error is None and out.valid
    assert out.front_matter == FrontMatter("en", True, 0, False, False)
    assert out.text == "# Title\n\nSome text."


H = ("primary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
     "is_table: False\nis_diagram: False\n")
ANSWER = "---\n" + H + "---\nBody text."
EN = ("en", True, 0, False, False)


def _with(key: str, value: str) -> str:
    """ANSWER with the line of ``key`` set to ``value``."""
    lines = [(f"{key}: {value}" if line.startswith(key + ":") else line) for line in H.splitlines()]
    return "---\n" + "\n".join(lines) + "\n---\nBody text."


#: (case, answer, olmOCR's PageResponse fields or None when it raises, olmOCR's natural_text)
PARITY = [
    ("canonical", ANSWER, EN, "Body text."),
    ("leading_newline", "\n" + ANSWER, None, None),
    ("leading_space", " " + ANSWER, None, None),
    ("bom", "\ufeff" + ANSWER, None, None),
    ("crlf", ANSWER.replace("\n", "\r\n"), None, None),
    ("crlf_body_only", "---\n" + H + "---\r\nline one\r\nline two\r\n", EN, "line one\r\nline two"),
    ("trailing_space_opening", "--- \n" + H + "---\nBody text.", None, None),
    ("opening_four_dashes", "----\n" + H + "---\nBody text.", None, None),
    ("closing_four_dashes", "---\n" + H + "----\nBody text.", EN, "-\nBody text."),
    ("closing_with_words", "---\n" + H + "--- Body text.", EN, "Body text."),
    ("closing_trailing_spaces", "---\n" + H + "---   \nBody text.", EN, "Body text."),
    ("no_text_after", "---\n" + H + "---", EN, None),
    ("no_text_after_newline", "---\n" + H + "---\n", EN, None),
    ("only_blank_after", "---\n" + H + "---\n \n\t\n", EN, None),
    ("later_rule_kept", "---\n" + H + "---\nA\n---\nB", EN, "A\n---\nB"),
    ("not_closed", "---\n" + H + "Body text.", None, None),
    ("cut_in_key", "---\nprimary_language: en\nis_rotation_valid: True\nrotation_co", None, None),
    ("empty_block", "---\n---\nBody text.", None, None),
    ("blank_block", "---\n\n---\nBody text.", None, None),
    ("no_front_matter", "Body text.", None, None),
    ("empty_answer", "", None, None),
    ("only_opening", "---\n", None, None),
    ("only_dashes", "---", None, None),
    ("lang_123", _with("primary_language", "123"), None, None),
    ("lang_no", _with("primary_language", "no"), (None, True, 0, False, False), "Body text."),
    ("lang_quoted_no", _with("primary_language", '"no"'), ("no", True, 0, False, False), "Body text."),
    ("lang_yes", _with("primary_language", "yes"), (None, True, 0, False, False), "Body text."),
    ("lang_null", _with("primary_language", "null"), (None, True, 0, False, False), "Body text."),
    ("lang_None_word", _with("primary_language", "None"), ("None", True, 0, False, False), "Body text."),
    ("lang_tilde", _with("primary_language", "~"), (None, True, 0, False, False), "Body text."),
    ("lang_empty", _with("primary_language", ""), (None, True, 0, False, False), "Body text."),
    ("lang_empty_quoted", _with("primary_language", '""'), (None, True, 0, False, False), "Body text."),
    ("lang_zero", _with("primary_language", "0"), (None, True, 0, False, False), "Body text."),
    ("lang_float", _with("primary_language", "1.5"), None, None),
    ("lang_empty_list", _with("primary_language", "[]"), (None, True, 0, False, False), "Body text."),
    ("lang_list", _with("primary_language", "[en]"), None, None),
    ("lang_empty_map", _with("primary_language", "{}"), (None, True, 0, False, False), "Body text."),
    ("lang_date", _with("primary_language", "2020-01-01"), None, None),
    ("lang_bad_date", _with("primary_language", "2020-13-45"), None, None),
    ("lang_upper", _with("primary_language", "EN"), ("EN", True, 0, False, False), "Body text."),
    ("lang_comment", _with("primary_language", "en # English"), EN, "Body text."),
    ("table_on", _with("is_table", "on"), ("en", True, 0, True, False), "Body text."),
    ("table_off", _with("is_table", "off"), EN, "Body text."),
    ("table_yes", _with("is_table", "yes"), ("en", True, 0, True, False), "Body text."),
    ("table_y", _with("is_table", "y"), EN, "Body text."),
    ("table_TRUE", _with("is_table", "TRUE"), ("en", True, 0, True, False), "Body text."),
    ("table_mixed_case", _with("is_table", "tRuE"), ("en", True, 0, True, False), "Body text."),
    ("table_quoted_true", _with("is_table", '"True"'), ("en", True, 0, True, False), "Body text."),
    ("table_quoted_yes", _with("is_table", '"yes"'), EN, "Body text."),
    ("table_maybe", _with("is_table", "maybe"), EN, "Body text."),
    ("table_one", _with("is_table", "1"), None, None),
    ("table_null", _with("is_table", "null"), None, None),
    ("table_empty", _with("is_table", ""), None, None),
    ("rotation_valid_false", _with("is_rotation_valid", "false"),
     ("en", False, 0, False, False), "Body text."),
    ("diagram_true", _with("is_diagram", "true"), ("en", True, 0, False, True), "Body text."),
    ("rot_90", _with("rotation_correction", "90"), ("en", True, 90, False, False), "Body text."),
    ("rot_quoted_90", _with("rotation_correction", '"90"'), ("en", True, 90, False, False), "Body text."),
    ("rot_quoted_spaced_90", _with("rotation_correction", '" 90 "'),
     ("en", True, 90, False, False), "Body text."),
    ("rot_45", _with("rotation_correction", "45"), None, None),
    ("rot_float", _with("rotation_correction", "90.0"), None, None),
    ("rot_false", _with("rotation_correction", "false"), EN, "Body text."),
    ("rot_true", _with("rotation_correction", "true"), None, None),
    ("rot_hex", _with("rotation_correction", "0x5A"), ("en", True, 90, False, False), "Body text."),
    ("rot_quoted_hex", _with("rotation_correction", '"0x5A"'), None, None),
    ("rot_sexagesimal", _with("rotation_correction", "1:30"), ("en", True, 90, False, False), "Body text."),
    ("rot_underscore", _with("rotation_correction", "1_80"), ("en", True, 180, False, False), "Body text."),
    ("rot_plus", _with("rotation_correction", "+270"), ("en", True, 270, False, False), "Body text."),
    ("rot_word", _with("rotation_correction", "zero"), None, None),
    ("rot_null", _with("rotation_correction", "null"), None, None),
    ("rot_negative", _with("rotation_correction", "-90"), None, None),
    ("missing_key", "---\n" + H.replace("is_table: False\n", "") + "---\nBody text.", None, None),
    ("extra_key", "---\n" + H + "color: red\n---\nBody text.", None, None),
    ("natural_text_key", "---\n" + H + "natural_text: hi\n---\nBody text.", None, None),
    ("non_string_key", "---\n" + H + "1: x\n---\nBody text.", None, None),
    ("duplicate_key", "---\n" + H + "is_table: True\n---\nBody text.",
     ("en", True, 0, True, False), "Body text."),
    ("keys_reordered", "---\n" + "\n".join(reversed(H.splitlines())) + "\n---\nBody text.", EN, "Body text."),
    ("indented_keys", "---\n" + "".join("  " + line + "\n" for line in H.splitlines()) + "---\nBody text.",
     EN, "Body text."),
    ("comment_line", "---\n# page info\n" + H + "---\nBody text.", EN, "Body text."),
    ("flow_mapping", ("---\n{primary_language: en, is_rotation_valid: true, rotation_correction: 0, "
     "is_table: false, is_diagram: false}\n---\nBody text."),
     EN, "Body text."),
    ("document_end_marker", "---\n" + H + "...\n---\nBody text.", EN, "Body text."),
    ("invalid_yaml", "---\nprimary_language: [en\n---\nBody text.", None, None),
    ("tab_indent_yaml", "---\n" + H + "\tis_table: True\n---\nBody text.", None, None),
    ("list_block", "---\n- a\n- b\n---\nBody text.", None, None),
    ("scalar_block", ("---\nprimary_language is_rotation_valid rotation_correction is_table is_diagram\n"
     "---\nBody text."),
     None, None),
    ("python_tag", _with("primary_language", "!!python/name:os.system"), None, None),
    ("text_starts_with_dash_line", "---\n" + H + "---\n--\nBody text.", EN, "--\nBody text."),
]


@pytest.mark.parametrize(("answer", "fields", "natural_text"), [c[1:] for c in PARITY], ids=[c[0] for c in PARITY])
def test_parse_matches_olmocr_reference(answer, fields, natural_text):
    """Valid exactly when olmOCR's parser is, with its values and its page text."""
    out = parse_page_output(answer)
    if fields is None:
        assert out.front_matter is None and out.error
    else:
        assert out.error is None, out.error
        assert out.front_matter == FrontMatter(*fields)
        assert out.text == (natural_text or "")


@pytest.mark.parametrize(
    ("answer", "error_part", "text"),
    [
        ("Just text, no header.", "does not start with ---", "Just text, no header."),
        ("", "does not start with ---", ""),
        ("\n" + GOOD, "whitespace before the opening ---", "# Title\n\nSome text."),
        ("\ufeff  " + GOOD.replace("\n", "\r\n"), "byte order mark", "# Title\n\nSome text."),
        (GOOD.replace("\n", "\r\n"), "CRLF", "# Title\n\nSome text."),
        (_with("rotation_correction", "45"), "rotation_correction: 45 is not one of", "Body text."),
        (_with("rotation_correction", "90.0"), "rotation_correction: 90.0 is not an integer", "Body text."),
        (_with("rotation_correction", "zero"), "rotation_correction: 'zero' is not an integer", "Body text."),
        (_with("primary_language", "123"), "primary_language: 123 is not a string", "Body text."),
        (_with("is_table", "1"), "is_table: 1 is not a boolean", "Body text."),
        (_with("primary_language", "2020-13-45"), "cannot be read (ValueError", "Body text."),
        ("---\n" + H.replace("is_table: False\n", "") + "---\nbody", "misses is_table", "body"),
        ("---\n" + H + "color: red\n---\nbody", "unexpected key(s) color", "body"),
        ("---\nprimary_language: [en\n---\nbody", "not valid YAML", "body"),
        ("---\n- a\n- b\n---\nbody", "not a mapping", "body"),
        ("---\n---\nbody", "front matter is empty", "body"),
        ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_co", "not closed", ""),
        ("---\nprimary_language: en\nis_rotation_valid: True\nHello world\nand more", "not closed",
         "Hello world\nand more"),
        ("--- primary_language: en\ntext", "first line is not exactly ---", "--- primary_language: en\ntext"),
    ],
)
def test_parse_invalid_says_why_and_keeps_text(answer, error_part, text):
    """Invalid answers: the reason in ``error``, and olmpipe's page text for the unit tests."""
    out = parse_page_output(answer)
    assert out.front_matter is None and not out.valid
    assert error_part in out.error
    assert out.text == text


def test_parse_bounds_yaml_size_and_nesting():
    """Blocks PyYAML would take seconds on are refused before parsing, with the reason."""
    long_block = _with("primary_language", "en # " + "x" * MAX_FRONT_MATTER_CHARS)
    assert "characters long" in parse_page_output(long_block).error
    nested = _with("primary_language", "[" * 500 + "]" * 500)
    assert "'[' / '{'" in parse_page_output(nested).error
    # just inside the bounds the block is parsed, as olmOCR would
    assert parse_page_output(_with("primary_language", "en # " + "x" * 1500)).front_matter == FrontMatter(*EN)
    deep = _with("primary_language", "[" * MAX_FRONT_MATTER_BRACKETS + "]" * MAX_FRONT_MATTER_BRACKETS)
    assert "is not a string" in parse_page_output(deep).error


def test_guided_form_is_read_as_yaml_reads_it():
    """Blocks in olmOCR's guided-decoding form (read without YAML) give what YAML gives them.

    A comment line in front makes the same block take the YAML path.
    """
    import itertools
    import string

    words = ("True", "False", "true", "false")
    blocks = [H.replace("en", a + b) for a, b in itertools.product(string.ascii_lowercase, repeat=2)]
    blocks += [H.replace("en", "null")]
    blocks += [
        f"primary_language: en\nis_rotation_valid: {v}\nrotation_correction: {r}\nis_table: {t}\nis_diagram: {d}"
        for v, r, t, d in itertools.product(words, (0, 90, 180, 270), words, words)
    ]
    for block in blocks:
        assert parse_front_matter(block) == parse_front_matter("# via YAML\n" + block), block
    assert parse_front_matter(H.replace("en", "no")).primary_language is None


def test_parse_front_matter_raises_value_error_only():
    assert parse_front_matter(H) == FrontMatter(*EN)
    for block in ("", "[", "a: &a [*a]", "x: 2020-13-45", "primary_language: !!python/name:os.system"):
        with pytest.raises(ValueError):
            parse_front_matter(block)


@given(
    lang=st.one_of(st.none(), st.sampled_from(["en", "de", "no", "yes", "on", "null", "None", "123", "1:30"]),
                   st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)),
    valid=st.booleans(),
    rotation=st.sampled_from([0, 90, 180, 270]),
    table=st.booleans(),
    diagram=st.booleans(),
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
)
def test_format_parse_roundtrip(lang, valid, rotation, table, diagram, text):
    """format_page_output quotes what YAML 1.1 would misread, so every language survives."""
    front = FrontMatter(lang, valid, rotation, table, diagram)
    out = parse_page_output(format_page_output(front, text))
    assert out.front_matter == front
    assert out.text == text.strip()


_PIECES = st.sampled_from(["---", "\n", "\r\n", " ", "----", "primary_language: ", "is_table: ", "no", "on",
                           "[", "{", "]", "}", "&a ", "*a", "!!", "2020-13-45", ":", "- ", "\ufeff", "#", H])


@given(st.one_of(st.text(max_size=200), st.lists(_PIECES, max_size=40).map("".join)))
def test_parse_never_raises(answer):
    out = parse_page_output(answer)
    assert isinstance(out.text, str)
    assert (out.front_matter is None) == (out.error is not None)


def test_yaml_aliases_within_the_budget_read_as_olmocr_reads_them():
    """Aliases are YAML that olmOCR's ``yaml.safe_load`` reads; below the expansion budget
    (``BoundedSafeLoader``) they give the same values, a recursive one is an invalid answer
    (olmOCR's value would be a list, which is an error too), and error messages stay short."""
    from olmpipe.prompts import MAX_FRONT_MATTER_NODES, bounded_yaml_load

    aliased = "---\nprimary_language: &l en\nis_rotation_valid: &t True\nrotation_correction: 0\n" \
              "is_table: *t\nis_diagram: False\n---\nBody text."
    assert parse_page_output(aliased).front_matter == FrontMatter("en", True, 0, True, False)
    merged = "base: &b {x: 1}\nmore:\n  <<: *b\n  y: 2"
    assert bounded_yaml_load(merged) == {"base": {"x": 1}, "more": {"x": 1, "y": 2}}
    assert "recursive YAML alias" in parse_page_output(_with("primary_language", "&a [*a]")).error
    wide = "[" + ", ".join(["x"] * (MAX_FRONT_MATTER_NODES // 2)) + "]"
    assert "is not a string" in parse_page_output(_with("primary_language", wide)).error
    assert len(parse_page_output(_with("primary_language", wide)).error) < 200
    too_wide = "&w [" + ", ".join(["x"] * 20) + "]\nl2: [" + ", ".join(["*w"] * 20) + "]"
    assert f"more than {MAX_FRONT_MATTER_NODES} YAML values" in parse_page_output(_with("primary_language", too_wide)).error
    # format_page_output reads a language back through the same loader (a language is at most a block)
    bomb = "[" + ", ".join(["*a"] * 9) + "]"
    assert format_page_output(FrontMatter(bomb, True, 0, False, False), "x").startswith('---\nprimary_language: "')

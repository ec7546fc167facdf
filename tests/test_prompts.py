"""olmpipe.prompts: the olmOCR v4 YAML prompt, chat messages and the front matter parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olmpipe.prompts import (
    PROMPT_V4_YAML,
    FrontMatter,
    build_messages,
    build_prompt,
    format_page_output,
    openai_content,
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

    from olmpipe.tinymodel import load_processor

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


def test_parse_keeps_later_horizontal_rules_in_text():
    out = parse_page_output(GOOD + "\n---\nmore text after a rule\n")
    assert out.valid
    assert out.text.endswith("---\nmore text after a rule")


@pytest.mark.parametrize(
    ("answer", "error_part", "text"),
    [
        ("Just text, no header.", "does not start with ---", "Just text, no header."),
        ("", "does not start with ---", ""),
        (
            "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 45\nis_table: False\n"
            "is_diagram: False\n---\nbody",
            "rotation_correction: 45 is not one of",
            "body",
        ),
        (
            "---\nprimary_language: en\nis_rotation_valid: maybe\nrotation_correction: 0\nis_table: False\n"
            "is_diagram: False\n---\nbody",
            "is_rotation_valid: 'maybe' is not a boolean",
            "body",
        ),
        (
            "---\nprimary_language: en\nrotation_correction: 0\nis_table: False\n"
            "is_diagram: False\n---\nbody",
            "misses is_rotation_valid",
            "body",
        ),
        (
            "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
            "is_diagram: False\ncolor: red\n---\nbody",
            "unexpected key(s) color",
            "body",
        ),
        ("---\nprimary_language: [en\n---\nbody", "not valid YAML", "body"),
        ("---\n- a\n- b\n---\nbody", "not a mapping", "body"),
        (
            "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: zero\nis_table: False\n"
            "is_diagram: False\n---\nbody",
            "rotation_correction: 'zero' is not an integer",
            "body",
        ),
        ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_co", "not closed", ""),
        (
            "---\nprimary_language: en\nis_rotation_valid: True\nHello world\nand more",
            "not closed",
            "Hello world\nand more",
        ),
        ("--- primary_language: en\ntext", "first line is not exactly ---", "--- primary_language: en\ntext"),
    ],
)
def test_parse_malformed_records_error_and_keeps_text(answer, error_part, text):
    out = parse_page_output(answer)
    assert out.front_matter is None
    assert error_part in out.error
    assert out.text == text


def test_parse_yaml_surprises_are_avoided():
    answer = GOOD.replace("primary_language: en", "primary_language: no").replace("True", "true")
    out = parse_page_output(answer)
    assert out.front_matter.primary_language == "no"  # Norwegian, not YAML's False
    assert out.front_matter.is_rotation_valid is True
    null = parse_page_output(GOOD.replace("primary_language: en", "primary_language: null"))
    assert null.front_matter.primary_language is None


def test_parse_crlf_bom_and_leading_space():
    out = parse_page_output("\ufeff  " + GOOD.replace("\n", "\r\n"))
    assert out.valid and out.text == "# Title\n\nSome text."


def test_parse_empty_body_and_non_string():
    assert parse_page_output(GOOD.split("# Title")[0]).text == ""
    bad = parse_page_output(None)  # type: ignore[arg-type]
    assert bad.front_matter is None and "not a string" in bad.error


@given(
    lang=st.one_of(st.none(), st.sampled_from(["en", "de", "no", "zh"])),
    valid=st.booleans(),
    rotation=st.sampled_from([0, 90, 180, 270]),
    table=st.booleans(),
    diagram=st.booleans(),
    text=st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\ufeff"), max_size=80
    ),
)
def test_format_parse_roundtrip(lang, valid, rotation, table, diagram, text):
    front = FrontMatter(lang, valid, rotation, table, diagram)
    out = parse_page_output(format_page_output(front, text))
    assert out.front_matter == front
    assert out.text == text.strip()


@given(st.text(max_size=200))
def test_parse_never_raises(answer):
    out = parse_page_output(answer)
    assert isinstance(out.text, str)
    assert (out.front_matter is None) == (out.error is not None)

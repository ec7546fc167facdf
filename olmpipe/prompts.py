"""The olmOCR 2 prompt/answer contract: the v4 "no anchoring, YAML front matter" prompt and its parser.

olmOCR 2 models are asked, with one fixed instruction followed by the page image, to answer with a
YAML front matter block describing the page and then the page text as markdown::

    ---
    primary_language: en
    is_rotation_valid: True
    rotation_correction: 0
    is_table: False
    is_diagram: False
    ---
    The page text ...

Everything that talks to a model goes through :func:`build_messages` (generation backends, the GRPO
dataset) so that baseline, training and evaluation see exactly the same prompt, and everything that
reads an answer goes through :func:`parse_page_output`, which never raises: a malformed front matter
is recorded in :attr:`PageOutput.error` (a reward signal for training) while the page text is still
extracted so that the unit tests can score it.

Which answers are valid, and the values and page text read from them, follow olmOCR 0.4.27's
``FrontMatterParser`` (``olmocr/train/front_matter.py``) exactly, YAML 1.1 quirks included, so that
the front matter reward and the valid-answer share match the reference; ``docs/front_matter.md``
lists the cases and the two places olmpipe departs (text of invalid answers, size bounds).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import yaml

#: Name recorded with every generation, so results say which prompt produced them.
PROMPT_NAME = "olmocr_v4_yaml_no_anchoring"

#: The instruction of olmOCR's ``build_no_anchoring_v4_yaml_prompt`` (v0.4.27), verbatim: models
#: fine-tuned by olmOCR expect exactly these words, typos included ("LateX").
PROMPT_V4_YAML = (
    "Attached is one page of a document that you must process. "
    "Just return the plain text representation of this document as if you were reading it naturally. "
    "Convert equations to LateX and tables to HTML.\n"
    "If there are any figures or charts, label them with the following markdown syntax "
    "![Alt text describing the contents of the figure](page_startx_starty_width_height.png)\n"
    "Return your output as markdown, with a front matter section on top specifying values for the "
    "primary_language, is_rotation_valid, rotation_correction, is_table, and is_diagram parameters."
)

#: Prompt tokens besides the page image: this instruction and the chat template around it (about
#: 130 tokens with the Qwen2.5-VL and Qwen3-VL tokenizers), rounded up. The image adds the tokens
#: of :meth:`olmpipe.models.architectures.ImageBudget.tokens` (the processor expands one placeholder into
#: them), so one page's prompt is at most ``image tokens + PROMPT_TEXT_TOKENS`` long.
PROMPT_TEXT_TOKENS = 160

#: The front matter keys, in the order olmOCR writes them.
FRONT_MATTER_FIELDS = (
    "primary_language",
    "is_rotation_valid",
    "rotation_correction",
    "is_table",
    "is_diagram",
)
VALID_ROTATIONS = (0, 90, 180, 270)

#: Bounds on the YAML olmpipe parses (a well-formed block is ~110 characters with no brackets):
#: PyYAML takes ~1 s on 2,000 nested ``[``. Blocks beyond them are invalid; olmOCR would parse them.
MAX_FRONT_MATTER_CHARS = 2048
MAX_FRONT_MATTER_BRACKETS = 64
#: Most YAML nodes a block may stand for once every alias is counted as a copy of what it names.
#: A well-formed block has 11 (a mapping of five pairs); nine levels of nine aliases in 556
#: characters stand for 9**9 (~387 million), whose ``repr`` in an error message took 44 s and 3.6 GB.
MAX_FRONT_MATTER_NODES = 256
#: Longest value shown in an error message about a front matter field.
_MAX_SHOWN_CHARS = 80
_KEY_LINE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*:")


def build_prompt() -> str:
    """Return the instruction text of the olmOCR v4 YAML prompt (no anchor text)."""
    return PROMPT_V4_YAML


def build_messages(image: Any | None = None) -> list[dict[str, Any]]:
    """Return the chat conversation asking for one page: a single user turn, text first, then the image.

    The result is a list with one message::

        [{"role": "user", "content": [{"type": "text", "text": PROMPT_V4_YAML},
                                      {"type": "image"}]}]

    - With ``image=None`` the image part is a bare ``{"type": "image"}`` placeholder. This is the
      form TRL's multimodal ``GRPOTrainer`` expects in a dataset's ``prompt`` column: the trainer
      fills the placeholder from the example's ``images`` (or ``image``) column with
      ``trl.data_utils.prepare_multimodal_messages``. The training dataset therefore stores
      ``{"prompt": build_messages(), "images": [<PIL image>]}``.
    - With an image (a ``PIL.Image.Image``, usually) it becomes ``{"type": "image", "image": image}``,
      ready for ``processor.apply_chat_template`` of Qwen2.5-VL (the transformers and vLLM backends
      render the prompt text from it and pass the image to the processor / engine separately).
    - The OpenAI-compatible backend sends the same message with the image as a base64
      ``image_url`` part (:func:`openai_content`).

    A fresh list is returned on every call, so callers may mutate it.
    """
    image_part: dict[str, Any] = {"type": "image"}
    if image is not None:
        image_part["image"] = image
    return [{"role": "user", "content": [{"type": "text", "text": build_prompt()}, image_part]}]


def openai_content(image_png_base64: str) -> list[dict[str, Any]]:
    """Return the user content of :func:`build_messages` in the OpenAI chat-completions form.

    ``image_png_base64`` is the PNG file of the page, base64-encoded; it travels as a data URL.
    """
    return [
        {"type": "text", "text": build_prompt()},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image_png_base64}"}},
    ]


@dataclass(frozen=True)
class FrontMatter:
    """The page description an olmOCR 2 model writes above the page text.

    The values are those olmOCR's ``PageResponse`` would hold for the same answer
    (``olmocr/prompts/prompts.py:67-92`` at v0.4.27), with one normalisation: a
    ``rotation_correction: false`` that olmOCR accepts (``False == 0``) is stored as the integer 0.
    """

    primary_language: str | None
    is_rotation_valid: bool
    rotation_correction: int
    is_table: bool
    is_diagram: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PageOutput:
    """A parsed model answer.

    ``front_matter`` is set exactly when olmOCR 0.4.27's parser accepts the answer, and then
    ``text`` is the ``natural_text`` it would extract ("" where olmOCR has None). Otherwise
    ``front_matter`` is None, ``error`` says why (e.g. ``"rotation_correction: 45 is not one of 0,
    90, 180, 270"``) and ``text`` is olmpipe's best guess at the page text, so that the unit tests
    can still score it (see ``docs/front_matter.md``). ``error`` is None exactly when
    ``front_matter`` is set.
    """

    front_matter: FrontMatter | None
    text: str
    error: str | None

    @property
    def valid(self) -> bool:
        return self.error is None


class _AliasBombError(yaml.YAMLError):
    """A YAML document whose aliases stand for more than :data:`MAX_FRONT_MATTER_NODES` nodes."""


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's ``SafeLoader`` that refuses documents whose aliases expand past a node budget.

    ``yaml.safe_load`` builds an alias as a reference to the object its anchor names, so nine levels
    of ``[*a, *a, ...]`` cost nothing to load -- but every later ``repr``, ``==`` or walk of the value
    visits each copy (the "billion laughs"). After composing, the document's node graph is counted
    with every alias expanded (memoized, so the count itself is linear in the document); past
    :data:`MAX_FRONT_MATTER_NODES`, or on a recursive alias, loading raises ``yaml.YAMLError``
    before anything is constructed. Documents without aliases are loaded exactly as ``SafeLoader``
    loads them.
    """

    max_nodes = MAX_FRONT_MATTER_NODES

    def get_single_node(self):  # PyYAML's Composer API: the document's root node (or None)
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node, self.max_nodes)
        return node


def _check_expansion(root: yaml.Node, limit: int) -> None:
    """Raise :class:`_AliasBombError` when ``root`` stands for more than ``limit`` nodes (aliases expanded)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise _AliasBombError("front matter has a recursive YAML alias")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                raise _AliasBombError(f"front matter has more than {limit} YAML values "
                                     "(each alias counted as a copy of what it names)")
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root)


def bounded_yaml_load(text: str) -> Any:
    """``yaml.safe_load(text)`` through :class:`BoundedSafeLoader` (raises ``yaml.YAMLError`` on an alias bomb)."""
    return yaml.load(text, Loader=BoundedSafeLoader)


def _show(value: Any) -> str:
    """``repr(value)``, cut to :data:`_MAX_SHOWN_CHARS` characters for an error message."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN_CHARS else text[: _MAX_SHOWN_CHARS - 3] + "..."


def _yaml_plain(value: str) -> str:
    """``value`` as a YAML scalar that reads back as that same string (quoted where YAML 1.1 would not)."""
    try:
        plain = "\n" not in value and bounded_yaml_load(value) == value
    except Exception:  # noqa: BLE001 - any failure to read it back means: quote it
        plain = False
    if plain:
        return value
    # a double-quoted scalar with every special character escaped, on one line
    return yaml.safe_dump(value, default_style='"', allow_unicode=False, width=float("inf")).strip()


def format_page_output(front_matter: FrontMatter, text: str) -> str:
    """Write an answer in the olmOCR 2 format (the inverse of :func:`parse_page_output`).

    Used to build reference answers (e.g. in tests); ``parse_page_output(format_page_output(fm, t))``
    gives back ``fm`` and ``t.strip()``. A language that YAML would read as something else
    (``no``, ``on``, ``123``, ``null``) is written quoted, so that it survives the round trip.
    """
    lang = "null" if front_matter.primary_language is None else _yaml_plain(front_matter.primary_language)
    head = (
        f"---\nprimary_language: {lang}\nis_rotation_valid: {front_matter.is_rotation_valid}\n"
        f"rotation_correction: {front_matter.rotation_correction}\nis_table: {front_matter.is_table}\n"
        f"is_diagram: {front_matter.is_diagram}\n---"
    )
    body = text.strip()
    return f"{head}\n{body}" if body else head


# -- olmOCR 0.4.27's reading of a front matter, field by field -----------------------------------
# olmocr/train/front_matter.py:55-100 converts each value of the YAML mapping by the type of the
# PageResponse field, then PageResponse.__post_init__ (olmocr/prompts/prompts.py:75-92) checks it.


def _reference_language(value: Any) -> str | None:
    """``primary_language``: YAML booleans (``no``!) and other falsy values become None; numbers fail."""
    if isinstance(value, bool):
        return None  # front_matter.py:83-84: `primary_language: no` (Norwegian) is read as None
    if isinstance(value, str):
        return value or None
    if not value:
        return None  # 0, 0.0, [], {} and null: front_matter.py:88
    raise ValueError(f"primary_language: {_show(value)} is not a string (write a language code or null)")


def _reference_bool(key: str, value: Any) -> bool:
    """Booleans: YAML 1.1 booleans (``on``, ``yes``...) as they are; any other string is ``lower() == "true"``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.lower() == "true"  # front_matter.py:79-80: `is_table: maybe` is False, not an error
    raise ValueError(f"{key}: {_show(value)} is not a boolean (expected True or False)")


def _reference_rotation(value: Any) -> int:
    """``rotation_correction``: an integer (or a string ``int()`` reads) in 0, 90, 180, 270."""
    if isinstance(value, str):
        try:
            value = int(value)  # front_matter.py:77-78
        except ValueError:
            raise ValueError(f"rotation_correction: {_show(value)} is not an integer") from None
    if not isinstance(value, int):  # 90.0 fails here (prompts.py:85-86)
        raise ValueError(  # noqa: TRY004 - a bad answer, not a bad call: callers catch ValueError
            f"rotation_correction: {_show(value)} is not an integer"
        )
    if value not in VALID_ROTATIONS:  # True (== 1) fails, False (== 0) passes, as in prompts.py:77
        raise ValueError(f"rotation_correction: {_show(value)} is not one of 0, 90, 180, 270")
    return int(value)


def _load_yaml(block: str) -> Any:
    """``yaml.safe_load(block) or {}`` (front_matter.py:48), bounded in size and alias expansion
    (:class:`BoundedSafeLoader`), never raising anything but ValueError."""
    if len(block) > MAX_FRONT_MATTER_CHARS:
        raise ValueError(f"front matter is {len(block)} characters long, more than olmpipe reads "
                         f"({MAX_FRONT_MATTER_CHARS})")
    brackets = block.count("[") + block.count("{")
    if brackets > MAX_FRONT_MATTER_BRACKETS:
        raise ValueError(f"front matter has {brackets} '[' / '{{', more than olmpipe reads "
                         f"({MAX_FRONT_MATTER_BRACKETS}; deep nesting makes YAML parsing slow)")
    try:
        return bounded_yaml_load(block) or {}
    except _AliasBombError as exc:
        raise ValueError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # noqa: BLE001 - e.g. `2020-13-45` (ValueError), deep nesting (RecursionError)
        # olmOCR counts any exception of its parser as an invalid answer (grpo_train.py:560).
        raise ValueError(f"front matter cannot be read ({type(exc).__name__}: {exc})") from None


#: The block olmOCR's guided decoding forces (``olmocr/pipeline.py:181``), which nearly every answer
#: has: read without YAML (PyYAML takes ~0.3-1 ms a block), with YAML 1.1's reading of its words.
_CANONICAL_BLOCK = re.compile(
    r"primary_language: ([a-z]{2}|null)\nis_rotation_valid: (True|False|true|false)\n"
    r"rotation_correction: (0|90|180|270)\nis_table: (True|False|true|false)\n"
    r"is_diagram: (True|False|true|false)\n?"
)
#: The values of ``[a-z]{2}|null`` that YAML 1.1 does not read as a string: the booleans ``no`` and
#: ``on`` and null, all of which olmOCR turns into a null language.
_CANONICAL_NULL_LANGUAGES = frozenset({"no", "on", "null"})


def _canonical_front_matter(block: str) -> FrontMatter | None:
    """The :class:`FrontMatter` of a block in the guided-decoding form, or None for any other block."""
    match = _CANONICAL_BLOCK.fullmatch(block)
    if match is None:
        return None
    lang, rotation_valid, rotation, table, diagram = match.groups()
    return FrontMatter(
        primary_language=None if lang in _CANONICAL_NULL_LANGUAGES else lang,
        is_rotation_valid=rotation_valid.lower() == "true",
        rotation_correction=int(rotation),
        is_table=table.lower() == "true",
        is_diagram=diagram.lower() == "true",
    )


def parse_front_matter(block: str) -> FrontMatter:
    """Parse the YAML between the two ``---`` lines into a :class:`FrontMatter`, as olmOCR 0.4.27 does.

    The block is read with ``yaml.safe_load`` (YAML 1.1) and each value converted the way
    ``FrontMatterParser._parse_front_matter`` does (``olmocr/train/front_matter.py:55-100``), so
    that the same blocks are accepted and give the same values, quirks included:
    ``primary_language: no`` gives None, ``is_table: on`` gives True, ``is_table: maybe`` gives False,
    ``primary_language: 123`` and ``rotation_correction: 90.0`` are errors. Raises ``ValueError``
    naming the offending key.
    """
    canonical = _canonical_front_matter(block)
    if canonical is not None:
        return canonical
    data = _load_yaml(block)
    if not isinstance(data, dict):
        raise ValueError(  # noqa: TRY004 - a bad answer, not a bad call: callers catch ValueError
            f"front matter is not a mapping of keys to values (got {type(data).__name__})"
        )
    missing = [key for key in FRONT_MATTER_FIELDS if key not in data]
    if missing:
        raise ValueError(f"front matter misses {', '.join(missing)}")
    front_matter = FrontMatter(
        primary_language=_reference_language(data["primary_language"]),
        is_rotation_valid=_reference_bool("is_rotation_valid", data["is_rotation_valid"]),
        rotation_correction=_reference_rotation(data["rotation_correction"]),
        is_table=_reference_bool("is_table", data["is_table"]),
        is_diagram=_reference_bool("is_diagram", data["is_diagram"]),
    )
    extra = [key for key in data if key not in FRONT_MATTER_FIELDS]
    if extra:
        raise ValueError(f"front matter has unexpected key(s) {', '.join(sorted(map(str, extra)))}")
    return front_matter


def _reference_split(answer: str) -> tuple[str, str] | None:
    """The block and the page text as olmOCR cuts them (``front_matter.py:39-45``), or None.

    The answer must start with exactly ``---\\n``; the block ends at the first ``\\n---`` found from
    the fifth character on, whatever follows it on that line (a closing ``----`` leaves ``-`` at
    the start of the text); the text is the rest, stripped.
    """
    if not answer.startswith("---\n"):
        return None
    end = answer.find("\n---", 4)
    if end == -1:
        return None
    return answer[4:end], answer[end + 4 :].strip()


def _unreadable_reason(answer: str) -> str:
    """Why olmOCR's parser finds no front matter in ``answer`` (which ``_reference_split`` rejected)."""
    if answer.startswith("\ufeff"):
        return "no front matter: the answer starts with a byte order mark, not with ---"
    if answer[:1].isspace() and answer.lstrip().startswith("---"):
        return "no front matter: whitespace before the opening --- (olmOCR needs it as the first characters)"
    if answer.startswith("---\r\n"):
        return "no front matter: CRLF line endings (olmOCR needs '---' and a bare '\\n' line end)"
    if not answer.startswith("---"):
        return "no front matter: the answer does not start with ---"
    if not answer.startswith("---\n"):
        return "no front matter: the first line is not exactly ---"
    if answer.startswith("---\n---"):
        return "front matter is empty (olmOCR looks for the closing --- from the fifth character on)"
    return "front matter is not closed by a --- line"


def _is_cut_header_line(line: str) -> bool:
    word = line.strip()
    return bool(word) and (any(f.startswith(word) for f in FRONT_MATTER_FIELDS) or "---".startswith(word))


def _split_unclosed(body: str) -> tuple[str, str]:
    """Split an unclosed front matter: leading ``key: value`` lines are the block, the rest is text."""
    lines = body.split("\n")
    cut = 0
    while cut < len(lines) and _KEY_LINE.match(lines[cut]):
        cut += 1
    if cut == len(lines) - 1 and _is_cut_header_line(lines[cut]):
        cut += 1  # the answer stopped in the middle of a key or of the closing ---
    return "\n".join(lines[:cut]), "\n".join(lines[cut:])


def _recover_text(answer: str) -> str:
    """olmpipe's page text of an answer olmOCR cannot read: the front-matter-like head removed.

    Tolerates a byte order mark, leading whitespace, CRLF line ends and a block cut by the token
    limit, so that an answer whose only fault is its front matter is still scored on its text.
    """
    answer = answer.replace("\r\n", "\n").lstrip("\ufeff")
    stripped = answer.lstrip()
    first_newline = stripped.find("\n")
    if not stripped.startswith("---") or first_newline == -1 or stripped[:first_newline].strip() != "---":
        return answer.strip()
    body = stripped[first_newline + 1 :]
    close = re.search(r"^---[ \t]*$", body, flags=re.MULTILINE)
    if close is None:
        return _split_unclosed(body)[1].strip()
    return body[close.end() :].strip()


def parse_page_output(text: str) -> PageOutput:
    """Split a model answer into front matter and page text the way olmOCR 0.4.27 does; never raises.

    - An answer olmOCR's ``FrontMatterParser`` accepts gives ``PageOutput(FrontMatter(...),
      natural_text, None)`` with the same values and text olmOCR gets (``docs/front_matter.md``
      lists the cases, e.g. a closing ``----`` is accepted and leaves ``-`` in the text).
    - A closed block with bad content (a missing or unknown key, ``rotation_correction: 45``,
      invalid YAML): ``front_matter=None``, the text below the block, and ``error`` names the problem.
    - No block olmOCR can find (no ``---``, a leading newline or space, a byte order mark, CRLF
      line ends, a block never closed): ``front_matter=None``, ``error`` says which, and the text
      is recovered leniently (:func:`_recover_text`) so that the unit tests can still score it.
    """
    if not isinstance(text, str):
        return PageOutput(None, "", f"answer is not a string but {type(text).__name__}")
    split = _reference_split(text)
    if split is None:
        return PageOutput(None, _recover_text(text), _unreadable_reason(text))
    block, page_text = split
    try:
        front_matter = parse_front_matter(block)
    except ValueError as exc:
        return PageOutput(None, page_text, str(exc))
    return PageOutput(front_matter, page_text, None)

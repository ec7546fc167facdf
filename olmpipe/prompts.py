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

#: The front matter keys, in the order olmOCR writes them.
FRONT_MATTER_FIELDS = (
    "primary_language",
    "is_rotation_valid",
    "rotation_correction",
    "is_table",
    "is_diagram",
)
VALID_ROTATIONS = (0, 90, 180, 270)

_NULL_WORDS = {"", "null", "none", "~"}
_TRUE_WORDS = {"true", "yes"}
_FALSE_WORDS = {"false", "no"}
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
    """The page description an olmOCR 2 model writes above the page text."""

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

    ``front_matter`` is None when the block is missing or malformed, and ``error`` then says why
    (e.g. ``"rotation_correction: 45 is not one of 0, 90, 180, 270"``). ``text`` is the page text
    below the front matter, stripped: the part olmOCR-Bench scores. ``error`` is None exactly when
    ``front_matter`` is set.
    """

    front_matter: FrontMatter | None
    text: str
    error: str | None

    @property
    def valid(self) -> bool:
        return self.error is None


def format_page_output(front_matter: FrontMatter, text: str) -> str:
    """Write an answer in the olmOCR 2 format (the inverse of :func:`parse_page_output`).

    Used to build reference answers (e.g. in tests); ``parse_page_output(format_page_output(fm, t))``
    gives back ``fm`` and ``t.strip()``.
    """
    lang = "null" if front_matter.primary_language is None else front_matter.primary_language
    head = (
        f"---\nprimary_language: {lang}\nis_rotation_valid: {front_matter.is_rotation_valid}\n"
        f"rotation_correction: {front_matter.rotation_correction}\nis_table: {front_matter.is_table}\n"
        f"is_diagram: {front_matter.is_diagram}\n---"
    )
    body = text.strip()
    return f"{head}\n{body}" if body else head


def _as_bool(key: str, value: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"{key}: {value!r} is not a boolean (expected True or False)")


def _as_rotation(value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"rotation_correction: {value!r} is not an integer") from None
    if number not in VALID_ROTATIONS:
        raise ValueError(f"rotation_correction: {number} is not one of 0, 90, 180, 270")
    return number


def _as_language(value: str) -> str | None:
    word = value.strip()
    return None if word.lower() in _NULL_WORDS else word


def parse_front_matter(block: str) -> FrontMatter:
    """Parse the YAML between the two ``---`` lines into a :class:`FrontMatter`.

    Scalars are read as plain strings (YAML's BaseLoader) and converted here, so that YAML 1.1's
    surprises cannot corrupt the page description: ``primary_language: no`` stays Norwegian
    instead of becoming ``False``. Raises ``ValueError`` naming the offending key.
    """
    try:
        data = yaml.load(block, Loader=yaml.BaseLoader)  # BaseLoader builds only str/list/dict
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"front matter is not a mapping of keys to values (got {type(data).__name__})")
    missing = [key for key in FRONT_MATTER_FIELDS if key not in data]
    if missing:
        raise ValueError(f"front matter misses {', '.join(missing)}")
    extra = sorted(set(data) - set(FRONT_MATTER_FIELDS))
    if extra:
        raise ValueError(f"front matter has unexpected key(s) {', '.join(map(str, extra))}")
    for key in FRONT_MATTER_FIELDS:
        if not isinstance(data[key], str):
            raise ValueError(f"{key}: expected a single value, got a {type(data[key]).__name__}")
    return FrontMatter(
        primary_language=_as_language(data["primary_language"]),
        is_rotation_valid=_as_bool("is_rotation_valid", data["is_rotation_valid"]),
        rotation_correction=_as_rotation(data["rotation_correction"]),
        is_table=_as_bool("is_table", data["is_table"]),
        is_diagram=_as_bool("is_diagram", data["is_diagram"]),
    )


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


def parse_page_output(text: str) -> PageOutput:
    """Split a model answer into front matter and page text; never raises.

    - A well-formed answer gives ``PageOutput(FrontMatter(...), page_text, None)``.
    - No front matter at all: ``front_matter=None``, the whole answer is the text, and ``error``
      says the block is missing.
    - A block that opens with ``---`` but never closes (typically a generation cut by the token
      limit): its leading ``key: value`` lines are taken as the block, the rest as text, and the
      error says it was not closed.
    - A closed block with bad content (a missing or unknown key, ``rotation_correction: 45``,
      invalid YAML): the text below it is returned and ``error`` names the problem.
    """
    if not isinstance(text, str):
        return PageOutput(None, "", f"answer is not a string but {type(text).__name__}")
    answer = text.replace("\r\n", "\n").lstrip("\ufeff")
    stripped = answer.lstrip()
    if not stripped.startswith("---"):
        return PageOutput(None, answer.strip(), "no front matter: the answer does not start with ---")
    first_newline = stripped.find("\n")
    if first_newline == -1 or stripped[:first_newline].strip() != "---":
        return PageOutput(None, answer.strip(), "no front matter: the first line is not exactly ---")
    body = stripped[first_newline + 1 :]
    close = re.search(r"^---[ \t]*$", body, flags=re.MULTILINE)
    if close is None:
        block, page_text = _split_unclosed(body)
        return PageOutput(None, page_text.strip(), "front matter is not closed by a --- line")
    block, page_text = body[: close.start()], body[close.end() :]
    try:
        front_matter = parse_front_matter(block)
    except ValueError as exc:
        return PageOutput(None, page_text.strip(), str(exc))
    return PageOutput(front_matter, page_text.strip(), None)

"""Stage ``synth_html``: the HTML pages a synthetic bench is made from.

Three sources (``synth.source``):

- ``html``: every ``*.html`` file of ``synth.html_dir`` (default: the embedded pages in
  ``data/synth/``), rendered at ``synth.page_width_pt`` x ``synth.page_height_pt``;
- ``vlm``: every page of the PDFs in ``synth.pdf_dir``, rasterized with the rasterize stage's code
  (:func:`olmpipe.rasterize.rasterize_pdf`) and rewritten as HTML by a vision-language model behind
  an OpenAI-compatible server (``synth.vlm``; :class:`HtmlRewriteBackend` reuses the generation
  backend's requests, retries and concurrency with this project's own prompt). The page keeps its
  source size. Answers go to an append-only journal (``results/synth/html-journal.jsonl``, not a
  Snakemake output, so a failed or interrupted run keeps them) keyed by image hash, model and
  prompt; a rerun asks only for the pages it has no answer for;
- ``words``: ``synth.words.pages`` generated pages of a few large words from a small vocabulary
  (:mod:`olmpipe.synth.words`), the task of the learning run (README "A run that learns").

Output (``out_dir``, written to a temporary folder and moved into place): ``<name>.html`` per page
and ``index.jsonl`` with one line per page: ``name``, ``source``, ``width_pt``, ``height_pt``,
``status`` (``ok`` | ``skipped``) and ``error`` (why a page was skipped: not UTF-8, too large, no
HTML in the answer, ...).

    olmpipe synth html --out results/synth/html
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from olmpipe.generate.base import FINISH_STOP, PageRequest, Sampling
from olmpipe.generate.openai_backend import OpenAIBackend
from olmpipe.layout import SynthLayout
from olmpipe.rasterize import RasterizeError, rasterize_pdf
from olmpipe.records.files import file_sha256, publish_dir, staging_dir, write_jsonl
from olmpipe.records.synth import INDEX_NAME
from olmpipe.synth.words import word_pages

log = logging.getLogger(__name__)


#: The instruction sent with each page image (olmpipe's own wording; the conventions are those the
#: miner reads, the same as olmocr 0.4.27's ``generate_html_from_image`` asks for, lines 347-588).
HTML_PROMPT = """Rewrite this document page as one self-contained HTML file that renders to the same page.

Rules:
- Reproduce every piece of text exactly, in reading order; do not summarise or invent text.
- Put running heads in <header> and running feet in <footer>; put a page number in <div class="page-number">.
- Write tables as <table> with <th> for header cells; use rowspan/colspan where the page merges cells.
- Write equations as LaTeX: \\( ... \\) inline and \\[ ... \\] on their own line.
- Replace pictures and charts with <div class="image"></div> of the same size.
- Set <html lang="..."> to the page's main language. Use inline CSS only: no scripts, no external files.
- Size the layout so that everything fits on exactly one page of {width_pt:g} x {height_pt:g} points.

Answer with the HTML only, in one ```html code block."""


@dataclass
class HtmlEntry:
    """One line of ``index.jsonl``."""

    name: str
    source: str
    width_pt: float
    height_pt: float
    status: str = "ok"
    error: str | None = None


def read_index(html_dir: str | Path) -> list[HtmlEntry]:
    """The pages of a ``synth_html`` output folder, in name order."""
    path = Path(html_dir) / INDEX_NAME
    with open(path, encoding="utf-8") as fh:
        return [HtmlEntry(**json.loads(line)) for line in fh if line.strip()]


def decode_html(data: bytes, source: str, max_bytes: int) -> str:
    """The page's text, or ValueError naming the file and why it cannot be used."""
    if len(data) > max_bytes:
        raise ValueError(f"{source}: {len(data) / 1e6:.1f} MB of HTML, more than synth.max_html_bytes "
                         f"({max_bytes} bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(f"{source}: line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); save the file as UTF-8") from None
    if "\x00" in text:
        raise ValueError(f"{source}: contains NUL characters; not an HTML text file")
    return text.lstrip("\ufeff")


#: Deepest element nesting a page may have. Chromium's HTML parser stops nesting at 512 levels and
#: appends deeper elements as siblings, so beyond that the printed page is no longer the tree the
#: miner reads; real pages nest a few dozen levels. A page of 150,000 nested ``<div>`` (1.65 MB)
#: otherwise costs every tree walk time and depth for nothing.
MAX_HTML_DEPTH = 256


class _TooDeep(Exception):
    pass


class _DepthProbe:
    """An lxml parser target that only tracks element nesting (the events BeautifulSoup's lxml
    builder sees, so the same tree) and stops the parse past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit, self.depth, self.deepest = limit, 0, 0

    def start(self, tag, attrib) -> None:
        self.depth += 1
        self.deepest = max(self.deepest, self.depth)
        if self.depth > self.limit:
            raise _TooDeep

    def end(self, tag) -> None:
        self.depth -= 1

    def data(self, data) -> None:
        pass

    def comment(self, text) -> None:
        pass

    def close(self) -> int:
        return self.deepest


def check_nesting(html: str, source: str, limit: int = MAX_HTML_DEPTH) -> None:
    """Raise ValueError naming ``source`` when the page's elements nest deeper than ``limit``.

    >>> check_nesting("<div>" * 300, "deep.html")
    Traceback (most recent call last):
    ValueError: deep.html: elements nested more than 256 levels deep; ...
    """
    from lxml import etree

    probe = _DepthProbe(limit)
    parser = etree.HTMLParser(target=probe, recover=True, encoding="utf-8")
    try:
        parser.feed(html.encode("utf-8", "surrogatepass"))
        parser.close()
    except _TooDeep:
        raise ValueError(f"{source}: elements nested more than {limit} levels deep; Chromium flattens "
                         f"the tree past 512 levels, so the printed page would not be the HTML mined "
                         f"(unclosed tags? close them)") from None
    except etree.LxmlError:
        pass  # markup lxml cannot read at all is parsed leniently later, as before


def safe_name(text: str) -> str:
    """A file-name stem made of letters, digits, ``_``, ``-`` and ``.``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "page"


def extract_html(answer: str) -> str | None:
    """The HTML of a model answer: the last fenced ``html`` block, or the ``<html>...</html>`` span."""
    blocks = re.findall(r"```(?:html|HTML)?\s*\n(.*?)```", answer, re.DOTALL)
    for block in reversed(blocks):
        if "<" in block:
            return block.strip()
    match = re.search(r"<html\b.*</html>", answer, re.DOTALL | re.IGNORECASE)
    return match.group(0) if match else None


class HtmlRewriteBackend(OpenAIBackend):
    """The OpenAI-compatible backend with :data:`HTML_PROMPT` instead of the OCR prompt."""

    def __init__(self, *args, page_sizes: Mapping[str, tuple[float, float]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.page_sizes = dict(page_sizes or {})

    def payload(self, request: PageRequest, sampling: Sampling) -> dict[str, Any]:
        body = super().payload(request, sampling)
        width, height = self.page_sizes.get(request.image, (612.0, 792.0))
        body["messages"][0]["content"][0] = {"type": "text",
                                             "text": HTML_PROMPT.format(width_pt=width, height_pt=height)}
        return body


def _journal_key(image_sha: str, vlm: Mapping[str, Any]) -> str:
    fields = [image_sha, vlm["model"], str(vlm["max_tokens"]), str(vlm["temperature"]),
              hashlib.sha256(HTML_PROMPT.encode()).hexdigest()[:16]]
    return hashlib.sha256("\0".join(fields).encode()).hexdigest()[:24]


def _read_journal(path: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    if path.is_file():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            try:
                record = json.loads(line)
                out[record["key"]] = record
            except (ValueError, KeyError, TypeError):
                log.warning("%s: line %d is not a journal record (a write cut short?); ignored", path, n)
    return out


def _vlm_pages(synth: Mapping[str, Any], work_dir: Path, journal_path: Path,
               backend=None) -> list[tuple[HtmlEntry, str | None]]:
    """Rasterize the PDFs of ``synth.pdf_dir``, ask for each page's HTML (journal first)."""
    vlm = synth["vlm"]
    pdf_dir = Path(synth["pdf_dir"] or "")
    if not synth["pdf_dir"] or not pdf_dir.is_dir():
        raise FileNotFoundError(f"synth.pdf_dir {synth['pdf_dir']!r} is not a folder (synth.source is vlm)")
    pages: list[tuple[str, str, float, float]] = []  # name, image, width_pt, height_pt
    out: list[tuple[HtmlEntry, str | None]] = []
    for pdf in sorted(p for p in pdf_dir.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf"):
        rel = pdf.relative_to(pdf_dir).as_posix()
        stem = safe_name(rel[:-4])
        try:
            manifest = rasterize_pdf(pdf, work_dir / "source-pages" / stem, pdf_id=rel,
                                     longest_side=synth["vlm"]["longest_side"])
        except RasterizeError as exc:
            out.append((HtmlEntry(stem, rel, 0, 0, "skipped", str(exc)), None))
            continue
        pages += [(f"{stem}_pg{p.page}", p.image, p.width_pt, p.height_pt) for p in manifest.pages]
    journal = _read_journal(journal_path)
    keys = {image: _journal_key(file_sha256(image), vlm) for _, image, _, _ in pages}
    todo = [(name, image, w, h) for name, image, w, h in pages if keys[image] not in journal]
    if todo:
        if backend is None:
            backend = HtmlRewriteBackend(vlm["base_url"], vlm["model"], api_key=_api_key(vlm),
                                         concurrency=vlm["concurrency"], retries=vlm["retries"],
                                         timeout_s=vlm["timeout_s"])
        backend.page_sizes = {image: (w, h) for _, image, w, h in todo}
        sampling = Sampling(max_new_tokens=vlm["max_tokens"], temperature=vlm["temperature"], top_p=1.0,
                            seed=synth["seed"])
        requests = [PageRequest(pdf=name, page=1, repeat=1, image=image) for name, image, _, _ in todo]
        completions = backend.generate(requests, [sampling] * len(requests))
        with open(journal_path, "a", encoding="utf-8") as fh:
            for (name, image, _, _), done in zip(todo, completions, strict=True):
                if done.finish_reason == FINISH_STOP or done.text:
                    record = {"key": keys[image], "name": name, "text": done.text,
                              "finish_reason": done.finish_reason, "error": done.error}
                    fh.write(json.dumps(record) + "\n")
                    journal[keys[image]] = record
                else:
                    journal[keys[image]] = {"text": "", "error": done.error or done.finish_reason}
    for name, image, w, h in pages:
        record = journal[keys[image]]
        html = extract_html(record.get("text") or "")
        if html is None:
            reason = record.get("error") or "the model's answer holds no HTML"
            out.append((HtmlEntry(name, image, w, h, "skipped", f"{image}: {reason}"), None))
        elif record.get("finish_reason") == "length":
            out.append((HtmlEntry(name, image, w, h, "skipped", f"{image}: the answer was cut at "
                                  f"synth.vlm.max_tokens ({vlm['max_tokens']})"), None))
        else:
            out.append((HtmlEntry(name, image, w, h), html))
    return out


def _api_key(vlm: Mapping[str, Any]) -> str | None:
    if not vlm["api_key_env"]:
        return None
    key = os.environ.get(vlm["api_key_env"])
    if not key:
        raise RuntimeError(f"synth.vlm.api_key_env names {vlm['api_key_env']!r}, which is not set")
    return key


def collect_html(synth: Mapping[str, Any], out_dir: str | Path, *, journal_path: str | Path | None = None,
                 backend=None) -> list[HtmlEntry]:
    """Write the pages of ``synth.source`` to ``out_dir`` (``<name>.html`` + ``index.jsonl``)."""
    out_dir = Path(out_dir)
    tmp = staging_dir(out_dir)
    if synth["source"] == "html":
        html_dir = Path(synth["html_dir"])
        if not html_dir.is_dir():
            raise FileNotFoundError(f"synth.html_dir {str(html_dir)!r} is not a folder (relative paths are "
                                    f"read from the working directory)")
        items: list[tuple[HtmlEntry, str | None]] = []
        for path in sorted(html_dir.rglob("*")):
            if not path.is_file() or path.suffix.lower() not in (".html", ".htm"):
                continue
            name = safe_name(path.relative_to(html_dir).as_posix().rsplit(".", 1)[0])
            entry = HtmlEntry(name, str(path), synth["page_width_pt"], synth["page_height_pt"])
            try:
                text = decode_html(path.read_bytes(), str(path), synth["max_html_bytes"])
                check_nesting(text, str(path))
                items.append((entry, text))
            except ValueError as exc:
                entry.status, entry.error = "skipped", str(exc)
                items.append((entry, None))
    elif synth["source"] == "words":
        items = [(HtmlEntry(name, "words", synth["page_width_pt"], synth["page_height_pt"]), html)
                 for name, html in word_pages(synth)]
    else:
        journal = Path(journal_path or SynthLayout(str(out_dir.parent)).html_journal)
        journal.parent.mkdir(parents=True, exist_ok=True)
        items = _vlm_pages(synth, out_dir.parent, journal, backend)
        for entry, html in items:
            if html is not None and len(html.encode()) > synth["max_html_bytes"]:
                entry.status, entry.error = "skipped", f"{entry.source}: answer larger than synth.max_html_bytes"
            elif html is not None:
                try:
                    check_nesting(html, entry.source)
                except ValueError as exc:
                    entry.status, entry.error = "skipped", str(exc)
    seen: set[str] = set()
    entries = []
    for entry, html in items:
        if entry.name in seen:
            entry.status, entry.error = "skipped", f"{entry.source}: another page has the name {entry.name}"
        seen.add(entry.name)
        if entry.status == "ok":
            (tmp / f"{entry.name}.html").write_text(html, encoding="utf-8")
        else:
            log.warning("skipping %s", entry.error)
        entries.append(entry)
    write_jsonl(tmp / INDEX_NAME, (asdict(e) for e in entries), ensure_ascii=True)
    publish_dir(tmp, out_dir)
    log.info("%d HTML page(s), %d skipped", sum(e.status == "ok" for e in entries),
             sum(e.status != "ok" for e in entries))
    return entries

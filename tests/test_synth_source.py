"""olmpipe.synth.source: HTML files (bad encodings, oversized pages) and the VLM path against a
stand-in OpenAI-compatible server on 127.0.0.1 that answers with HTML."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.localhttp import LocalHttpServer, QuietHandler

from olmpipe.config import load_config
from olmpipe.synth.source import MAX_HTML_DEPTH, check_nesting, collect_html, extract_html, read_index

REPO = Path(__file__).resolve().parents[1]
PAGE_HTML = '<html lang="en"><body><h1>Rewritten page</h1><p>Text the model read from the image.</p></body></html>'


def synth_config(**overrides):
    return load_config(overrides={"synth": overrides})["synth"]


class HtmlServer(LocalHttpServer):
    """Chat completions answering ``answer`` (a fenced HTML block by default); records each request."""

    def __init__(self, answer: str = f"Here it is:\n```html\n{PAGE_HTML}\n```\n"):
        self.answer = answer
        self.received: list[dict] = []
        owner = self

        class Handler(QuietHandler):
            def do_POST(self):
                owner.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                body = json.dumps({"choices": [{"message": {"content": owner.answer}, "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 20}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1"


def test_html_files_bad_ones_skipped_with_file_line_and_reason(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(REPO / "data/synth/text_report.html", src / "good.html")
    (src / "latin1.html").write_bytes("<html><body>\n<p>caf\u00e9</p></body></html>".encode("latin-1"))
    (src / "huge.html").write_text("<table>" + "<tr><td>cell value</td></tr>" * 200_000 + "</table>")
    (src / "notes.txt").write_text("not a page")
    entries = collect_html(synth_config(html_dir=str(src)), tmp_path / "out")
    status = {e.name: (e.status, e.error) for e in entries}
    assert status["good"] == ("ok", None)
    assert status["latin1"][0] == "skipped" and "latin1.html: line 2: not UTF-8" in status["latin1"][1]
    assert status["huge"][0] == "skipped" and "synth.max_html_bytes" in status["huge"][1]
    assert "notes" not in status
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good.html", "index.jsonl"]
    assert [e.name for e in read_index(tmp_path / "out")] == [e.name for e in entries]
    assert not (tmp_path / "out.tmp").exists()


def test_a_page_nested_too_deep_is_skipped_at_synth_html_with_the_reason(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "deep.html").write_text("<html><body>" + "<div>" * 150_000 + "<p>Deep text.</p>" + "</div>" * 150_000)
    (src / "nested.html").write_text("<div>" * (MAX_HTML_DEPTH - 3) + "<p>Nested but fine.</p>")
    (src / "paragraphs.html").write_text("<p>Unclosed paragraph." * 10_000)  # each <p> closes the last
    entries = {e.name: e for e in collect_html(synth_config(html_dir=str(src)), tmp_path / "out")}
    assert entries["deep"].status == "skipped"
    assert "deep.html: elements nested more than 256 levels deep" in entries["deep"].error
    assert entries["nested"].status == entries["paragraphs"].status == "ok"
    with pytest.raises(ValueError, match="nested more than 256"):
        check_nesting("<span>" * (MAX_HTML_DEPTH + 1), "spans.html")


def test_missing_html_folder_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="synth.html_dir"):
        collect_html(synth_config(html_dir=str(tmp_path / "nope")), tmp_path / "out")


def test_extract_html_from_answers():
    assert extract_html("```html\n<p>a</p>\n```") == "<p>a</p>"
    assert extract_html("text <html><body>x</body></html> more") == "<html><body>x</body></html>"
    assert extract_html("I cannot read this page.") is None


@pytest.fixture
def pdf_dir(tmp_path):
    folder = tmp_path / "mypdfs"
    folder.mkdir()
    shutil.copy(REPO / "data/bench/olmocr-sample/pdfs/small_page_size.pdf", folder / "small.pdf")
    return folder


def test_vlm_pages_are_rewritten_cached_and_resumed(tmp_path, pdf_dir):
    journal = tmp_path / "journal.jsonl"
    with HtmlServer() as server:
        cfg = synth_config(source="vlm", pdf_dir=str(pdf_dir),
                           vlm={"base_url": server.url, "model": "big-vlm", "longest_side": 64})
        entries = collect_html(cfg, tmp_path / "synth" / "html", journal_path=journal)
        assert [(e.name, e.status) for e in entries] == [("small_pg1", "ok")]
        assert (tmp_path / "synth/html/small_pg1.html").read_text() == PAGE_HTML
        request = server.received[0]
        prompt = request["messages"][0]["content"][0]["text"]
        assert request["model"] == "big-vlm" and "HTML" in prompt
        assert request["messages"][0]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
        assert (entries[0].width_pt, entries[0].height_pt) == (180, 300)  # the source page's size
        assert "one page of 180 x 300 points" in prompt
        collect_html(cfg, tmp_path / "synth" / "html", journal_path=journal)
        assert len(server.received) == 1  # the journal answered the rerun


def test_vlm_answer_without_html_skips_the_page_with_its_reason(tmp_path, pdf_dir):
    with HtmlServer(answer="Sorry, I can't help with that.") as server:
        cfg = synth_config(source="vlm", pdf_dir=str(pdf_dir),
                           vlm={"base_url": server.url, "model": "m", "longest_side": 64})
        entries = collect_html(cfg, tmp_path / "synth" / "html", journal_path=tmp_path / "j.jsonl")
    assert entries[0].status == "skipped" and "holds no HTML" in entries[0].error
    assert (tmp_path / "synth/html/index.jsonl").is_file()


def test_word_pages_are_generated_from_the_seed_with_distinct_words_per_page(tmp_path):
    from olmpipe.synth.words import page_words, vocabulary

    synth = synth_config(source="words", words={"pages": 5, "vocabulary": 8, "letters": 5, "lines": 6})
    entries = collect_html(synth, tmp_path / "html")
    assert [e.name for e in entries] == [f"words_{i:04d}" for i in range(5)]
    assert all(e.status == "ok" and e.source == "words" for e in entries)
    vocab = vocabulary(8, 5, seed=0)
    assert len(set(vocab)) == 8 and all(len(w) == 5 and w.isalpha() for w in vocab)
    html = (tmp_path / "html" / "words_0000.html").read_text()
    words = page_words(vocab, 6, seed=0, index=0)
    assert len(set(words)) == 6 and "".join(f"<p>{w}</p>\n" for w in words).strip() in html
    assert page_words(vocab, 6, seed=0, index=0, in_order=True) == sorted(words, key=vocab.index)
    again = collect_html(synth, tmp_path / "again")
    assert [(tmp_path / "again" / f"{e.name}.html").read_text() for e in again] == \
        [(tmp_path / "html" / f"{e.name}.html").read_text() for e in entries]  # same seed, same pages
    assert vocabulary(8, 5, seed=1) != vocab
    with pytest.raises(ValueError, match="more than the vocabulary"):
        page_words(vocab, 9, seed=0, index=0)

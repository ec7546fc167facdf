"""olmpipe.generate.transformers_backend on the embedded tiny Qwen2.5-VL (CPU, random weights)."""

from __future__ import annotations

import pytest

from olmpipe.generate import DecodingSettings, decode_batch, make_backend, make_requests
from olmpipe.generate.base import PageRequest, Sampling
from olmpipe.generate.transformers_backend import TransformersBackend


@pytest.fixture(scope="module")
def page_images(tmp_path_factory):
    from PIL import Image, ImageDraw

    folder = tmp_path_factory.mktemp("pages")
    paths = []
    for i, size in enumerate([(200, 260), (260, 200)]):
        image = Image.new("RGB", size, "white")
        ImageDraw.Draw(image).text((10, 10 + 20 * i), f"Page {i + 1}: hello", fill="black")
        path = folder / f"pg{i + 1}.png"
        image.save(path)
        paths.append(str(path))
    broken = folder / "broken.png"
    broken.write_bytes(b"not a png")
    return paths, str(broken)


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    from olmpipe.config import load_config

    cfg = load_config(overrides={"generation": {"batch_size": 2, "transformers": {"device": "cpu"}}})
    b = make_backend(cfg["generation"], tiny_model_dir)
    assert isinstance(b, TransformersBackend)
    return b


def test_batch_with_left_padding_gives_one_completion_each(backend, page_images):
    paths, _ = page_images
    requests = [PageRequest("a.pdf", 1, 1, paths[0]), PageRequest("b.pdf", 1, 1, paths[1])]
    sampling = [Sampling(8, 0.7, 1.0, 1), Sampling(8, 0.7, 1.0, 2)]
    before = backend.model_seconds
    completions = backend.generate(requests, sampling)
    assert len(completions) == 2
    for c in completions:
        assert c.finish_reason in {"stop", "length"}
        assert 1 <= c.completion_tokens <= 8
        assert c.prompt_tokens > 50  # prompt text plus vision tokens
        assert isinstance(c.text, str) and c.error is None
    assert backend.model_seconds > before
    assert backend.processor.tokenizer.padding_side == "left"


def test_greedy_is_deterministic_and_batch_independent(backend, page_images):
    paths, _ = page_images
    one = backend.generate([PageRequest("a.pdf", 1, 1, paths[0])], [Sampling(6, 0.0, 1.0, 0)])
    two = backend.generate(
        [PageRequest("a.pdf", 1, 1, paths[0]), PageRequest("b.pdf", 1, 1, paths[1])],
        [Sampling(6, 0.0, 1.0, 0), Sampling(6, 0.0, 1.0, 0)],
    )
    assert one[0].text == two[0].text
    assert one[0].completion_tokens == two[0].completion_tokens


def test_mixed_sampling_parameters_are_grouped_in_request_order(backend, page_images):
    paths, _ = page_images
    requests = [PageRequest("a.pdf", 1, r, paths[r % 2]) for r in range(1, 4)]
    sampling = [Sampling(4, 0.1, 1.0, 0), Sampling(3, 0.8, 0.9, 0), Sampling(4, 0.1, 1.0, 0)]
    completions = backend.generate(requests, sampling)
    assert len(completions) == 3
    assert completions[1].completion_tokens <= 3


def test_unreadable_image_is_an_error_completion_not_a_crash(backend, page_images):
    paths, broken = page_images
    completions = backend.generate(
        [PageRequest("x.pdf", 1, 1, broken), PageRequest("a.pdf", 1, 1, paths[0])],
        [Sampling(4, 0.1, 1.0, 0)] * 2,
    )
    assert completions[0].finish_reason == "error" and broken in completions[0].error
    assert completions[1].finish_reason in {"stop", "length"}


def test_decode_batch_records_are_well_formed(backend, page_images):
    paths, _ = page_images
    pages = [{"pdf": "a.pdf", "page": 1, "image": paths[0]}, {"pdf": "b.pdf", "page": 2, "image": paths[1]}]
    settings = DecodingSettings(
        max_new_tokens=8, temperatures=(0.1, 0.8), top_p=1.0, seed=0, repeats=2, batch_size=4
    )
    records = decode_batch(
        backend, make_requests(pages, 2), settings, image_hashes={}, model="tiny", fingerprint="fp"
    )
    assert [r.key for r in records] == [("a.pdf", 1, 1), ("a.pdf", 1, 2), ("b.pdf", 2, 1), ("b.pdf", 2, 2)]
    for r in records:
        assert r.backend == "transformers" and r.model == "tiny"
        assert 1 <= len(r.attempts) <= 2
        assert r.failed == (r.finish_reason != "stop")
        assert r.front_matter is None or r.front_matter_error is None
        assert isinstance(r.text, str)


def test_prefetched_batch_gives_the_same_answers(backend, page_images):
    paths, _ = page_images
    first = [PageRequest("a.pdf", 1, 1, paths[0])]
    second = [PageRequest("b.pdf", 1, 1, paths[1])]
    greedy = [Sampling(5, 0.0, 1.0, 0)]
    plain = backend.generate(second, greedy)
    backend.generate(first, greedy)  # the cache now holds `first`
    backend.prefetch(second)
    assert tuple(r.image for r in second) in backend._pending
    backend.generate(first, greedy)
    prefetched = backend.generate(second, greedy)
    assert backend._pending == {}
    assert prefetched[0].text == plain[0].text and prefetched[0].prompt_tokens == plain[0].prompt_tokens

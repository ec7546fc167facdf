"""The transformers backend: Hugging Face ``generate`` on CPU or GPU, batched with left padding.

The embedded default uses it (the tiny random Qwen2.5-VL on CPU); on a GPU it runs any local
Qwen2.5-VL folder in bf16. Requests of one call that share sampling parameters are padded into one
``generate`` batch (left padding, so every row's answer starts at the same column).

Seeding: ``generate`` samples from torch's global generator, so each batch is seeded with the
first request's seed; results are reproducible for the same batch composition, not per request
(the vLLM and OpenAI backends seed per request).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from olmpipe.generate.base import (
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    GenerationBackend,
    PageRequest,
    Sampling,
    check_lengths,
)
from olmpipe.prompts import build_messages

logger = logging.getLogger(__name__)


def _eos_ids(model: Any, processor: Any) -> set[int]:
    """Every token id that ends an answer: the generation config's EOS ids and the tokenizer's."""
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    tokenizer = getattr(processor, "tokenizer", processor)
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(
            "the model has no EOS token id "
            "(generation_config.eos_token_id and tokenizer.eos_token_id are unset)"
        )
    return ids


def load_page_image(path: str):
    """Open a rasterized page as an RGB PIL image (fully read, so the file handle is closed)."""
    from PIL import Image

    with Image.open(path) as img:
        img.load()
        return img if img.mode == "RGB" else img.convert("RGB")


class TransformersBackend(GenerationBackend):
    """Generate with a loaded Qwen2.5-VL model and its processor.

    Build it from a model folder with :meth:`from_path`, or pass an already loaded ``model`` and
    ``processor`` (the evaluate stage and the benchmarks reuse one model across runs).
    """

    name = "transformers"

    def __init__(self, model: Any, processor: Any, *, model_path: str = "", batch_size: int = 4) -> None:
        super().__init__()
        self.model = model
        self.processor = processor
        self.model_path = str(model_path)
        self.batch_size = max(1, int(batch_size))
        self.eos_ids = _eos_ids(model, processor)
        tokenizer = getattr(processor, "tokenizer", processor)
        tokenizer.padding_side = "left"
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self._last_encoding: tuple[tuple[str, ...], tuple[Any, list[int], dict[int, Completion]]] | None = (
            None
        )
        self._pending: dict[tuple[str, ...], Future] = {}
        #: wall time the generating thread spent waiting for page encodings (not overlapped)
        self.encode_seconds = 0.0
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def from_config(cls, model_path: str | Path, generation: Mapping[str, Any]) -> TransformersBackend:
        """Load ``model_path`` with the ``generation.transformers`` device/dtype settings."""
        import torch

        from olmpipe.models.load import load_model_and_processor

        section = generation["transformers"]
        device = section["device"]
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = None if section["dtype"] == "auto" else section["dtype"]
        model, processor = load_model_and_processor(model_path, dtype=dtype, device=device)
        logger.info("transformers backend: %s on %s (%s)", model_path, device, model.dtype)
        return cls(model, processor, model_path=str(model_path), batch_size=generation["batch_size"])

    def generate(self, requests: Sequence[PageRequest], sampling: Sequence[Sampling]) -> list[Completion]:
        check_lengths(requests, sampling)
        results: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for i, params in enumerate(sampling):
            knobs = tuple(sorted(params.extra_knobs().items()))
            groups[(params.max_new_tokens, params.temperature, params.top_p, knobs)].append(i)
        for indices in groups.values():
            for start in range(0, len(indices), self.batch_size):
                chunk = indices[start : start + self.batch_size]
                for i, completion in zip(
                    chunk,
                    self._generate_batch([requests[i] for i in chunk], [sampling[i] for i in chunk]),
                    strict=True,
                ):
                    results[i] = completion
        if any(r is None for r in results):
            raise RuntimeError("transformers backend: a request got no completion (internal error)")
        return results  # type: ignore[return-value]

    def prefetch(self, requests: Sequence[PageRequest]) -> None:
        """Start encoding the next batch in a background thread while the current one generates.

        Image decoding and preprocessing (PIL, numpy) then overlap with ``generate``; torch runs
        on the configured threads, the encoder on one more. At most one batch is prefetched.
        """
        key = tuple(r.image for r in requests)
        if not requests or key in self._pending or (self._last_encoding and self._last_encoding[0] == key):
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="olmpipe-encode")
        for stale in list(self._pending):
            self._pending.pop(stale).cancel()
        self._pending[key] = self._pool.submit(self._encode_now, list(requests))

    def _encode(self, requests: Sequence[PageRequest]) -> tuple[Any, list[int], dict[int, Completion]]:
        """Processor inputs of a batch, the rows that have them, and error completions of unreadable pages.

        The encoding of the previous batch is kept: the temperature ladder resubmits the same pages,
        and a batch whose pages all ended without EOS is resubmitted unchanged, so it skips image
        decoding and preprocessing. A batch announced by :meth:`prefetch` is taken from its thread.
        """
        key = tuple(r.image for r in requests)
        if self._last_encoding is not None and self._last_encoding[0] == key:
            return self._last_encoding[1]
        future = self._pending.pop(key, None)
        encoding = future.result() if future is not None else self._encode_now(requests)
        self._last_encoding = (key, encoding)
        return encoding

    def _encode_now(self, requests: Sequence[PageRequest]) -> tuple[Any, list[int], dict[int, Completion]]:
        errors: dict[int, Completion] = {}
        images, texts, live = [], [], []
        for i, request in enumerate(requests):
            try:
                image = load_page_image(request.image)
            except (OSError, ValueError) as exc:
                errors[i] = Completion(
                    "", FINISH_ERROR, error=f"cannot read page image {request.image}: {exc}"
                )
                continue
            images.append(image)
            texts.append(
                self.processor.apply_chat_template(
                    build_messages(image), tokenize=False, add_generation_prompt=True
                )
            )
            live.append(i)
        inputs = None
        if live:
            inputs = self.processor(text=texts, images=images, padding=True, return_tensors="pt")
            inputs = inputs.to(self.model.device)
        return inputs, live, errors

    def _generate_batch(
        self, requests: Sequence[PageRequest], sampling: Sequence[Sampling]
    ) -> list[Completion]:
        import torch

        t0 = time.perf_counter()
        inputs, live, errors = self._encode(requests)
        self.encode_seconds += time.perf_counter() - t0
        out: list[Completion | None] = [errors.get(i) for i in range(len(requests))]
        if live:
            params = sampling[live[0]]
            torch.manual_seed(params.seed)
            kwargs: dict[str, Any] = {
                "max_new_tokens": params.max_new_tokens,
                "pad_token_id": self.pad_id,
                "eos_token_id": sorted(self.eos_ids),
            }
            if params.temperature > 0:
                kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            # top_k / min_p / repetition_penalty only when on (the difficulty stage's TRL knobs)
            kwargs.update(params.extra_knobs())
            t1 = time.perf_counter()
            with torch.inference_mode():
                generated = self.model.generate(**inputs, **kwargs)
            self.model_seconds += time.perf_counter() - t1
            new_tokens = generated[:, inputs["input_ids"].shape[1] :].tolist()
            prompt_lengths = inputs["attention_mask"].sum(dim=1).tolist()
            share = (time.perf_counter() - t0) / len(live)
            for row, i in enumerate(live):
                out[i] = self._completion(new_tokens[row], int(prompt_lengths[row]), share)
        return out  # type: ignore[return-value]

    def _completion(self, tokens: list[int], prompt_tokens: int, seconds: float) -> Completion:
        end = next((k for k, tok in enumerate(tokens) if tok in self.eos_ids), None)
        if end is None:
            body, finish, count = tokens, FINISH_LENGTH, len(tokens)
        else:
            body, finish, count = tokens[:end], FINISH_STOP, end + 1
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        text = tokenizer.decode(body, skip_special_tokens=True)
        return Completion(text, finish, prompt_tokens=prompt_tokens, completion_tokens=count, seconds=seconds)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._pending.clear()
        self._last_encoding = None
        self.model = None
        self.processor = None

"""The OpenAI-compatible backend: any chat-completions server (``vllm serve``, SGLang, a hosted API).

Requests go to ``<base_url>/chat/completions`` with the olmOCR prompt and the page PNG as a base64
data URL, ``generation.openai.concurrency`` at a time (threads; the standard library's HTTP client,
no extra dependency). The API key is read from the environment variable named by
``generation.openai.api_key_env`` (never from the config file itself).

Retries: a connection error, a timeout (``timeout_s`` per request), an HTTP 408/409/429/5xx or a
malformed answer (not JSON, no ``choices``, no text) is retried up to ``retries`` times, sleeping
``backoff_s * 2**k`` seconds (capped at 60 s) before retry ``k + 1``; other HTTP errors (400, 401,
404 ...) are not retried. A request that still fails becomes a ``Completion(finish_reason="error")``
naming the last problem; the decoding ladder then tries the page at its next temperature.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from olmpipe.generate.base import (
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    GenerationBackend,
    GenerationError,
    PageRequest,
    Sampling,
    check_lengths,
)
from olmpipe.prompts import openai_content

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 409, 429}
MAX_BACKOFF_S = 60.0


class _Retryable(Exception):
    """A failure worth another try (connection, timeout, 5xx, malformed answer)."""


class _Fatal(Exception):
    """A failure that another try will not fix (4xx other than 408/409/429)."""


def parse_chat_completion(body: bytes) -> Completion:
    """Turn a chat-completions response body into a :class:`Completion`; ``_Retryable`` if malformed."""
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        text = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:  # RecursionError: deep nesting
        snippet = body[:200].decode("utf-8", errors="replace")
        raise _Retryable(f"malformed answer ({type(exc).__name__}: {exc}): {snippet!r}") from None
    if not isinstance(text, str):
        raise _Retryable(f"malformed answer: message content is {type(text).__name__}, not text")
    reason = choice.get("finish_reason")
    usage = data.get("usage") or {}
    if reason == "stop":
        finish, error = FINISH_STOP, None
    elif reason == "length":
        finish, error = FINISH_LENGTH, None
    else:
        finish, error = FINISH_ERROR, f"server finish_reason {reason!r}"
    return Completion(
        text,
        finish,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        error=error,
    )


class OpenAIBackend(GenerationBackend):
    """Send page requests to an OpenAI-compatible chat-completions endpoint."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        concurrency: int = 8,
        retries: int = 3,
        backoff_s: float = 1.0,
        timeout_s: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__()
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.concurrency = max(1, int(concurrency))
        self.retries = max(0, int(retries))
        self.backoff_s = float(backoff_s)
        self.timeout_s = float(timeout_s)
        self.sleep = sleep

    @classmethod
    def from_config(cls, generation: Mapping[str, Any]) -> OpenAIBackend:
        """Build from ``generation.openai``; the API key comes from the variable named by ``api_key_env``."""
        section = generation["openai"]
        key_env = section["api_key_env"]
        api_key = None
        if key_env:
            api_key = os.environ.get(key_env)
            if not api_key:
                raise GenerationError(
                    f"generation.openai.api_key_env names the environment variable {key_env!r}, "
                    "which is not set; "
                    "export it or set api_key_env: null for a server without authentication"
                )
        return cls(
            section["base_url"],
            section["model"],
            api_key=api_key,
            concurrency=section["concurrency"],
            retries=section["retries"],
            backoff_s=section["backoff_s"],
            timeout_s=section["timeout_s"],
        )

    def generate(self, requests: Sequence[PageRequest], sampling: Sequence[Sampling]) -> list[Completion]:
        check_lengths(requests, sampling)
        if not requests:
            return []
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            results = list(pool.map(self._one, requests, sampling))
        self.model_seconds += time.perf_counter() - t0
        return results

    def payload(self, request: PageRequest, sampling: Sampling) -> dict[str, Any]:
        """The JSON body of one chat-completions request.

        ``top_k``, ``min_p`` and ``repetition_penalty`` (only sent when a request sets them: the
        difficulty stage's TRL knobs) are not in OpenAI's API; vLLM's server accepts them as extra
        sampling parameters of its chat-completions request.
        """
        with open(request.image, "rb") as fh:
            image_b64 = base64.b64encode(fh.read()).decode("ascii")
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": openai_content(image_b64)}],
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": sampling.seed,
            **sampling.extra_knobs(),
        }

    def _one(self, request: PageRequest, sampling: Sampling) -> Completion:
        t0 = time.perf_counter()
        try:
            body = json.dumps(self.payload(request, sampling)).encode("utf-8")
        except OSError as exc:
            return Completion("", FINISH_ERROR, error=f"cannot read page image {request.image}: {exc}")
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                delay = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1))
                logger.warning(
                    "%s page %d repeat %d: %s; retry %d/%d in %.1fs",
                    request.pdf,
                    request.page,
                    request.repeat,
                    problem,
                    attempt,
                    self.retries,
                    delay,
                )
                self.sleep(delay)
            try:
                completion = parse_chat_completion(self._post(body))
            except _Retryable as exc:
                problem = str(exc)
                continue
            except _Fatal as exc:
                problem = str(exc)
                break
            seconds = time.perf_counter() - t0
            return Completion(
                completion.text,
                completion.finish_reason,
                completion.prompt_tokens,
                completion.completion_tokens,
                seconds,
                completion.error,
            )
        return Completion(
            "",
            FINISH_ERROR,
            seconds=time.perf_counter() - t0,
            error=f"{self.url}: {problem} (after {attempt + 1} tries)",
        )

    def _post(self, body: bytes) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        http_request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(http_request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", errors="replace")
            message = f"HTTP {exc.code} {exc.reason}: {detail!r}"
            if exc.code in RETRYABLE_STATUS or exc.code >= 500:
                raise _Retryable(message) from None
            raise _Fatal(message) from None
        except TimeoutError as exc:
            raise _Retryable(f"no answer within {self.timeout_s:g}s ({exc})") from None
        except http.client.HTTPException as exc:
            raise _Retryable(f"broken HTTP answer: {type(exc).__name__}: {exc}") from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise _Retryable(f"no answer within {self.timeout_s:g}s ({reason})") from None
            raise _Retryable(f"connection failed: {reason}") from None

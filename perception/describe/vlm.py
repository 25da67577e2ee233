"""OpenAI-compatible vision-language model client with structured, validated output.

Usage (blocking; call it from a worker thread, or use :meth:`VLMClient.acomplete_json` from async code)::

    from pydantic import BaseModel
    from perception.describe.vlm import VLMClient, VLMError

    class Verdict(BaseModel):
        answer: str
        confidence: float

    vlm = VLMClient.from_config(manifest.vlm)          # base_url, model, api_key, timeout_s, ...
    try:
        verdict, usage = vlm.complete_json(
            [{"role": "system", "content": "Answer in JSON."},
             {"role": "user", "content": "Who is on the left?"}],
            Verdict, stage="consolidate", images=[jpeg_bytes], max_output_tokens=300)
    except VLMError as exc:                             # timeouts, exhausted retries, refusals
        ...                                             # fall back to the deterministic path
    usage.total_tokens; vlm.usage_totals()              # per-call and per-stage token counts

* ``images`` are JPEG/PNG bytes or BGR ``numpy`` arrays; each is resized (long side
  ``jpeg_max_side``) and sent as a ``data:image/jpeg;base64`` part appended to the last user message.
* The pydantic ``schema`` is sent as a strict ``response_format: json_schema`` and the reply is
  validated with it; an invalid or empty reply is retried like a 429 or a 5xx, up to
  ``max_attempts`` in all. Timeouts, 4xx errors and refusals are not retried.
* ``stage`` picks the per-stage budget (:class:`StageBudget`: output tokens, reasoning effort,
  timeout); explicit ``max_output_tokens`` / ``reasoning_effort`` arguments override it.
* At most ``max_concurrency`` requests are in flight per client, across threads.
* The API key is handed to the SDK and never logged, returned or shown in ``repr``.
"""

from __future__ import annotations

import base64
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import cv2
import numpy as np
from pydantic import BaseModel, ValidationError

from perception.errors import PerceptionError
from perception.segmenting.keyframes import encode_jpeg

__all__ = ["DEFAULT_BUDGETS", "StageBudget", "VLMClient", "VLMError", "VLMTimeoutError", "VLMUsage"]

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)
ImageInput = bytes | np.ndarray
Effort = Literal["minimal", "low", "medium", "high"]


class VLMError(PerceptionError):
    """A VLM request failed for good (after any retries); the caller should fall back."""

    def __init__(self, message: str, *, stage: str, attempts: int, status: int | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.attempts = attempts
        self.status = status


class VLMTimeoutError(VLMError):
    """The VLM did not answer within the stage's timeout (not retried)."""


@dataclass(frozen=True)
class StageBudget:
    """Limits of one pipeline stage: output tokens, reasoning effort, request timeout."""

    max_output_tokens: int = 800
    reasoning_effort: Effort | None = None
    timeout_s: float | None = None  # None: the client's timeout


#: defaults per stage; the manifest's ``vlm.stages`` overrides them
DEFAULT_BUDGETS: dict[str, StageBudget] = {
    "segment": StageBudget(800),
    "identity": StageBudget(300),
    "consolidate": StageBudget(600),
    "chapter": StageBudget(800),
}


@dataclass
class VLMUsage:
    """Tokens used by one logical call (summed over its attempts)."""

    stage: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class _Totals:
    calls: int = 0
    failures: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Retryable(Exception):
    """Internal: this attempt failed in a way worth retrying."""

    def __init__(self, reason: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.retry_after = retry_after


@dataclass
class VLMClient:
    """Structured-output VLM calls against any OpenAI-compatible ``/chat/completions`` endpoint."""

    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout_s: float = 60.0
    max_concurrency: int = 2
    max_attempts: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    budgets: Mapping[str, StageBudget] = field(default_factory=lambda: dict(DEFAULT_BUDGETS))
    jpeg_max_side: int = 768
    jpeg_quality: int = 80
    image_detail: Literal["low", "high", "auto"] = "low"
    token_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    http_client: Any = field(default=None, repr=False)  # an httpx2.Client (tests: ASGI transport)

    def __post_init__(self) -> None:
        import openai

        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        kwargs: dict[str, Any] = {"base_url": self.base_url, "api_key": self.api_key or "not-needed",
                                  "timeout": self.timeout_s, "max_retries": 0}
        if self.http_client is not None:
            kwargs["http_client"] = self.http_client
        self._client = openai.OpenAI(**kwargs)
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._lock = threading.Lock()
        self._totals: dict[str, _Totals] = {}
        self._in_flight = 0
        self.peak_in_flight = 0

    @classmethod
    def from_config(cls, cfg: Any, **overrides: Any) -> VLMClient:
        """Build from a manifest ``vlm`` section (``OpenAIVLMConfig``-shaped; ``stages`` optional)."""
        budgets = dict(DEFAULT_BUDGETS)
        default_out = getattr(cfg, "max_output_tokens", None)
        if default_out:
            budgets = {k: StageBudget(min(v.max_output_tokens, default_out) if k != "segment" else default_out,
                                      v.reasoning_effort, v.timeout_s) for k, v in budgets.items()}
        for name, stage in (getattr(cfg, "stages", None) or {}).items():
            budgets[name] = StageBudget(stage.max_output_tokens, stage.reasoning_effort,
                                        getattr(stage, "timeout_s", None))
        key = cfg.api_key.get_secret_value() if hasattr(cfg.api_key, "get_secret_value") else str(cfg.api_key or "")
        kwargs: dict[str, Any] = {"base_url": cfg.base_url, "model": cfg.model, "api_key": key,
                                  "timeout_s": cfg.timeout_s, "max_concurrency": cfg.max_concurrency,
                                  "budgets": budgets, "max_attempts": getattr(cfg, "max_attempts", 3)}
        kwargs.update(overrides)
        return cls(**kwargs)

    # ------------------------------------------------------------------------------ calls

    def complete_json(self, messages: Sequence[Mapping[str, Any]], schema: type[T], *, stage: str,
                      images: Sequence[ImageInput] = (), max_output_tokens: int | None = None,
                      reasoning_effort: Effort | None = None, timeout_s: float | None = None
                      ) -> tuple[T, VLMUsage]:
        """Send ``messages`` (+ ``images``) and return the reply parsed as ``schema`` and its usage.

        Raises:
            VLMTimeoutError: no answer within the timeout.
            VLMError: a non-retryable HTTP error, a refusal, or every attempt failed.
        """
        budget = self.budgets.get(stage) or StageBudget()
        out_tokens = max_output_tokens or budget.max_output_tokens
        effort = reasoning_effort or budget.reasoning_effort
        timeout = timeout_s or budget.timeout_s or self.timeout_s
        body = self._request(messages, schema, images, out_tokens, effort)
        usage = VLMUsage(stage=stage)
        failed = True
        try:
            result = self._with_retries(body, schema, stage, timeout, usage)
            failed = False
            return result, usage
        finally:
            self._count(usage, failed=failed)

    def _with_retries(self, body: dict[str, Any], schema: type[T], stage: str, timeout: float,
                      usage: VLMUsage) -> T:
        """Attempt up to ``max_attempts`` times, backing off between retryable failures."""
        last: _Retryable | None = None
        for attempt in range(1, self.max_attempts + 1):
            usage.attempts = attempt
            try:
                with self._slot():
                    return self._attempt(body, schema, stage, timeout, usage)
            except _Retryable as exc:
                last = exc
                logger.warning("VLM %s stage attempt %d/%d failed: %s", stage, attempt, self.max_attempts, exc)
                if attempt < self.max_attempts:
                    time.sleep(self._delay(attempt, exc.retry_after))
        raise VLMError(f"VLM stage {stage!r} failed after {usage.attempts} attempts: {last}; check that model "
                       f"{self.model!r} at {self.base_url} supports structured output, or lower the load",
                       stage=stage, attempts=usage.attempts, status=last.status if last else None)

    async def acomplete_json(self, messages: Sequence[Mapping[str, Any]], schema: type[T], *, stage: str,
                             images: Sequence[ImageInput] = (), max_output_tokens: int | None = None,
                             reasoning_effort: Effort | None = None, timeout_s: float | None = None
                             ) -> tuple[T, VLMUsage]:
        """:meth:`complete_json` in a worker thread, for async callers."""
        import anyio

        def call() -> tuple[T, VLMUsage]:
            return self.complete_json(messages, schema, stage=stage, images=images,
                                      max_output_tokens=max_output_tokens, reasoning_effort=reasoning_effort,
                                      timeout_s=timeout_s)

        return await anyio.to_thread.run_sync(call)

    def usage_totals(self) -> dict[str, dict[str, int]]:
        """Per-stage counters: calls, failures, attempts, prompt/completion/total tokens."""
        with self._lock:
            return {stage: {"calls": t.calls, "failures": t.failures, "attempts": t.attempts,
                            "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
                            "total_tokens": t.prompt_tokens + t.completion_tokens}
                    for stage, t in self._totals.items()}

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    # ------------------------------------------------------------------------------ internals

    def _request(self, messages: Sequence[Mapping[str, Any]], schema: type[BaseModel], images: Sequence[ImageInput],
                 out_tokens: int, effort: Effort | None) -> dict[str, Any]:
        from openai.lib._pydantic import to_strict_json_schema

        msgs = [dict(m) for m in messages]
        if images:
            parts = [{"type": "image_url", "image_url": {"url": self.image_url(im), "detail": self.image_detail}}
                     for im in images]
            idx = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=None)
            if idx is None:
                msgs.append({"role": "user", "content": parts})
            else:
                content = msgs[idx].get("content") or []
                text_parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
                msgs[idx] = {**msgs[idx], "content": [*text_parts, *parts]}
        body: dict[str, Any] = {
            "model": self.model,
            "messages": msgs,
            "response_format": {"type": "json_schema", "json_schema": {
                "name": schema.__name__, "schema": to_strict_json_schema(schema), "strict": True}},
            self.token_param: out_tokens,
        }
        if effort is not None:
            body["reasoning_effort"] = effort
        return body

    def image_url(self, image: ImageInput) -> str:
        """A ``data:image/jpeg;base64`` URL of ``image`` resized to ``jpeg_max_side``."""
        if isinstance(image, bytes | bytearray):
            decoded = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
            if decoded is None:
                raise ValueError("an image passed to the VLM is not a decodable JPEG/PNG; pass encoded bytes "
                                 "or a BGR numpy array")
            image = decoded
        jpeg = encode_jpeg(image, self.jpeg_max_side, self.jpeg_quality)
        return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")

    def _attempt(self, body: dict[str, Any], schema: type[T], stage: str, timeout: float, usage: VLMUsage) -> T:
        import openai

        try:
            resp = self._client.chat.completions.create(**body, timeout=timeout)
        except openai.APITimeoutError:
            raise VLMTimeoutError(f"VLM stage {stage!r} timed out after {timeout:g}s at {self.base_url}; raise "
                                  f"`vlm.timeout_s` or use a faster model", stage=stage,
                                  attempts=usage.attempts) from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status == 429 or status >= 500:
                raise _Retryable(f"HTTP {status}", status, _retry_after(exc)) from None
            raise VLMError(f"VLM stage {stage!r} was rejected with HTTP {status} by {self.base_url}: "
                           f"{_short(exc.message)}; check `vlm.model`, `vlm.api_key` and `vlm.base_url`",
                           stage=stage, attempts=usage.attempts, status=status) from None
        except openai.APIConnectionError as exc:
            raise VLMError(f"cannot reach the VLM at {self.base_url} ({type(exc).__name__}); check `vlm.base_url` "
                           f"and that the server is running", stage=stage, attempts=usage.attempts) from None
        if resp.usage is not None:
            usage.prompt_tokens += resp.usage.prompt_tokens or 0
            usage.completion_tokens += resp.usage.completion_tokens or 0
        if not resp.choices:
            raise _Retryable("empty reply (no choices)")
        msg = resp.choices[0].message
        if getattr(msg, "refusal", None):
            raise VLMError(f"VLM stage {stage!r} refused: {_short(msg.refusal or '')}", stage=stage,
                           attempts=usage.attempts)
        content = (msg.content or "").strip()
        if not content:
            raise _Retryable(f"empty content (finish_reason={resp.choices[0].finish_reason})")
        try:
            return schema.model_validate_json(content)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise _Retryable(f"invalid JSON for {schema.__name__}: {first['type']} at "
                             f"{'.'.join(map(str, first['loc'])) or '<root>'}") from None

    def _slot(self) -> _Slot:
        return _Slot(self)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        if retry_after is not None:
            base = min(self.max_backoff_s, max(base, retry_after))
        return base * (0.5 + random.random() / 2)

    def _count(self, usage: VLMUsage, *, failed: bool) -> None:
        with self._lock:
            t = self._totals.setdefault(usage.stage, _Totals())
            t.calls += 1
            t.failures += int(failed)
            t.attempts += usage.attempts
            t.prompt_tokens += usage.prompt_tokens
            t.completion_tokens += usage.completion_tokens


class _Slot:
    """Context manager holding one of the client's concurrency slots."""

    def __init__(self, client: VLMClient) -> None:
        self.client = client

    def __enter__(self) -> None:
        self.client._slots.acquire()
        with self.client._lock:
            self.client._in_flight += 1
            self.client.peak_in_flight = max(self.client.peak_in_flight, self.client._in_flight)

    def __exit__(self, *exc: object) -> None:
        with self.client._lock:
            self.client._in_flight -= 1
        self.client._slots.release()


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, ValueError):
        return None


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""Model clients: the offline scripted model (runs.scripted) and any OpenAI-compatible endpoint."""

import functools
import itertools
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2
import openai
from django.conf import settings

from runs import inflight


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model sent it

    def as_message_part(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ModelResponse:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)

    def as_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.as_message_part() for call in self.tool_calls]
        return message


class ModelError(Exception):
    """The model could not answer (HTTP error, timeout, unreadable reply)."""


class ModelThrottled(ModelError):
    """The endpoint kept asking for a pause (429) for longer than a call may wait."""


class DeltaSink(Protocol):
    """Where a streaming call puts the text as the model writes it (runs.deltas)."""

    async def add(self, text: str) -> None: ...


# A conversation's messages and the tools' schemas, as the chat completions API takes them.
Messages = list[dict[str, Any]]
ToolSchemas = list[dict[str, Any]]


class ModelClient(Protocol):
    # True when a call waits on the network: the worker awaits `acomplete` on its event loop
    # (runs.inflight) and keeps polling the run for cancellation; otherwise `complete` runs
    # inline.
    waits: bool

    def complete(self, *, messages: Messages, tools: ToolSchemas) -> ModelResponse: ...

    async def acomplete(
        self, *, messages: Messages, tools: ToolSchemas, deltas: DeltaSink | None = None
    ) -> ModelResponse: ...


# Clients per endpoint for the whole process, made and used on the event loop only; calls
# take them in turn. Several small connection pools rather than one large one: the HTTP pool
# looks through all its connections whenever a request starts or ends, which with hundreds of
# connections in one pool took a quarter of a worker's time (measured with the llm bench), and
# with 32 a pool still took a fifteenth of it: 8 a pool.
CONNECTIONS_PER_CLIENT = 8
_clients: dict[tuple[str, str, float], itertools.cycle] = {}


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for all the clients: making one reads the CA bundle (20 ms each, on
    the event loop, while the first calls wait)."""
    return httpx2.create_ssl_context()


def _client(base_url: str, api_key: str, timeout: float) -> openai.AsyncOpenAI:
    key = (base_url, api_key, timeout)
    if key not in _clients:
        in_flight = settings.AGENTPORTAL["WORKER_IN_FLIGHT"]
        limits = httpx2.Limits(
            max_connections=CONNECTIONS_PER_CLIENT, max_keepalive_connections=CONNECTIONS_PER_CLIENT
        )
        clients = [
            openai.AsyncOpenAI(
                base_url=base_url,
                api_key=api_key,
                timeout=timeout,
                max_retries=0,
                http_client=openai.DefaultAsyncHttpxClient(
                    limits=limits, timeout=timeout, verify=_tls()
                ),
            )
            for _ in range(-(-in_flight // CONNECTIONS_PER_CLIENT))
        ]
        _clients[key] = itertools.cycle(clients)
    return next(_clients[key])


class OpenAIChatModel:
    """Chat completions with tools on any OpenAI-compatible endpoint, awaited on the worker's
    event loop through the endpoint's gate (runs.inflight).

    The SDK's own retries are off: a failed call is a failed ModelAttempt, and the runtime
    decides whether to try again (and counts it against the run's budget). A 429 is not a
    failure: the endpoint's calls from this process pause for its Retry-After and this one is
    sent again, for up to AGENTPORTAL_MODEL_THROTTLE_SECONDS; the attempt counts its tries.
    """

    waits = True

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float):
        self.base_url, self.api_key, self.model, self.timeout = base_url, api_key, model, timeout

    async def acomplete(
        self, *, messages: Messages, tools: ToolSchemas, deltas: DeltaSink | None = None
    ) -> ModelResponse:
        # Posted as it is, not through the typed `create`: the SDK would walk every message and
        # tool schema on each call to transform them (a quarter of its CPU per call, measured
        # with hundreds in flight). The answer streams as chunks, read as the JSON they are
        # (building the SDK's model of each chunk was another quarter), which errors interrupt
        # with the same exceptions; usage comes with the last one.
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
        gate = inflight.gate(self.base_url, self.model)
        client = _client(self.base_url, self.api_key, self.timeout)
        started = time.monotonic()
        throttled = 0
        while True:
            try:
                async with gate:
                    stream = await client.post(
                        "/chat/completions",
                        body=body,
                        cast_to=object,
                        stream=True,
                        stream_cls=openai.AsyncStream[object],
                    )
                    response = await _streamed_response(stream, deltas)
                break
            except openai.RateLimitError as error:
                throttled += 1
                waited = time.monotonic() - started
                if waited >= settings.AGENTPORTAL["MODEL_THROTTLE_SECONDS"]:
                    raise ModelThrottled(
                        f"the endpoint asked for pauses for {waited:.0f}s ({throttled} tries)"
                    ) from error
                gate.pause(_retry_after(error))
            except openai.APIError as error:
                elapsed = time.monotonic() - started
                raise ModelError(f"{type(error).__name__} after {elapsed:.1f}s: {error}") from error
        if throttled:
            response.usage["throttled_tries"] = throttled
        return response


async def _streamed_response(stream, deltas: DeltaSink | None) -> ModelResponse:
    """Read a streamed answer (its chunks as decoded JSON) to its end, handing its text to
    `deltas` as it comes."""
    answer = _StreamedAnswer()
    async with stream:
        async for chunk in stream:
            try:
                text = answer.add(chunk)
            except (AttributeError, TypeError, ValueError) as error:
                raise ModelError(f"the model streamed an unreadable chunk: {error}") from error
            if text and deltas is not None:
                await deltas.add(text)
    return answer.response()


class _StreamedAnswer:
    """An answer put together from its chunks: the text, the tool calls by their index (their
    arguments may come in pieces) and the usage, which comes with the last chunk."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: dict[str, int] = {}
        self.chosen = False

    def add(self, chunk: dict[str, Any]) -> str | None:
        """Take one chunk in; returns the text it adds."""
        if usage := chunk.get("usage"):
            self.usage = {
                name: int(usage.get(name) or 0)
                for name in ("prompt_tokens", "completion_tokens", "total_tokens")
            }
        if not (choices := chunk.get("choices")):
            return None
        self.chosen = True
        delta = choices[0].get("delta") or {}
        for part in delta.get("tool_calls") or ():
            call = self.calls.setdefault(
                int(part.get("index") or 0), dict.fromkeys(("id", "name", "arguments"), "")
            )
            function = part.get("function") or {}
            call["id"] = part.get("id") or call["id"]
            call["name"] = function.get("name") or call["name"]
            call["arguments"] += function.get("arguments") or ""
        if text := delta.get("content"):
            if not isinstance(text, str):
                raise TypeError(f"content is a {type(text).__name__}")
            self.content.append(text)
        return text

    def response(self) -> ModelResponse:
        if not self.chosen:
            raise ModelError("the model answered without a choice")
        tool_calls = [
            ToolCall(id=call["id"], name=call["name"], arguments=call["arguments"] or "{}")
            for _, call in sorted(self.calls.items())
            if call["name"]
        ]
        text = "".join(self.content) or None
        if not tool_calls and not text:
            raise ModelError("the model answered with neither text nor a tool call")
        return ModelResponse(content=text, tool_calls=tool_calls, usage=self.usage)


def _retry_after(error: openai.RateLimitError) -> float:
    """The pause a 429 asks for: its Retry-After in seconds (1 when it names none, at most
    60)."""
    raw = error.response.headers.get("retry-after", "")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.05), 60.0)

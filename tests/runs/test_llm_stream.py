"""Reading a streamed answer: chunks as an OpenAI-compatible endpoint sends them, decoded JSON."""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from runs.llm import ModelError, ToolCall, _streamed_response

USAGE = {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}


class Stream:
    """The SDK's stream as `_streamed_response` uses it: an async context and iterator."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.closed = False

    async def __aenter__(self) -> "Stream":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.closed = True

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk


class Sink:
    def __init__(self) -> None:
        self.texts: list[str] = []

    async def add(self, text: str) -> None:
        self.texts.append(text)


def delta(**fields: Any) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def run_apart(coroutine):
    """Run on a loop of its own thread: after the browser tests the main thread already has
    Playwright's loop running."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def read(chunks: list[Any], sink: Sink | None = None):
    stream = Stream(chunks)
    response = run_apart(_streamed_response(stream, sink))
    assert stream.closed
    return response


def test_text_comes_word_by_word_to_the_sink_and_usage_from_the_last_chunk():
    # given
    sink = Sink()
    chunks = [
        delta(role="assistant", content=""),
        delta(content="Your"),
        delta(content=" parcel"),
        delta(content=None),
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "c", "choices": [], "usage": USAGE},
    ]

    # when
    response = read(chunks, sink)

    # then
    assert response.content == "Your parcel"
    assert sink.texts == ["Your", " parcel"]
    assert response.tool_calls == []
    assert response.usage == USAGE


def test_tool_calls_streamed_in_pieces_and_interleaved_are_put_together_by_index():
    # given: two calls, their arguments cut in pieces as OpenAI sends them
    first = {"id": "call_a", "type": "function", "function": {"name": "track", "arguments": ""}}
    second = {"id": "call_b", "type": "function", "function": {"name": "locker", "arguments": ""}}
    chunks = [
        delta(role="assistant", content=None, tool_calls=[{"index": 0, **first}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"parcel'}}]),
        delta(tool_calls=[{"index": 1, **second}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '_id": "PCL-1"}'}}]),
        delta(tool_calls=[{"index": 1, "function": {"arguments": '{"parcel_id": "PCL-2"}'}}]),
        {"id": "c", "choices": [], "usage": None},
    ]

    # when
    response = read(chunks)

    # then
    assert response.content is None
    assert response.tool_calls == [
        ToolCall(id="call_a", name="track", arguments='{"parcel_id": "PCL-1"}'),
        ToolCall(id="call_b", name="locker", arguments='{"parcel_id": "PCL-2"}'),
    ]
    assert response.usage == {}


@pytest.mark.parametrize(
    ("chunks", "says"),
    [
        ([["not", "an", "object"]], "unreadable chunk"),
        ([{"choices": ["not an object"]}], "unreadable chunk"),
        ([delta(content=7)], "unreadable chunk"),
        ([delta(tool_calls=[{"index": "first"}])], "unreadable chunk"),
        ([{"choices": [], "usage": USAGE}], "without a choice"),
        ([delta(role="assistant", content="")], "neither text nor a tool call"),
    ],
)
def test_an_unreadable_or_empty_answer_is_a_model_error_and_the_stream_is_closed(chunks, says):
    # given
    stream = Stream(chunks)

    # when
    with pytest.raises(ModelError, match=says):
        run_apart(_streamed_response(stream, Sink()))

    # then
    assert stream.closed

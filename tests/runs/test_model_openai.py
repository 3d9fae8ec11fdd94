"""The OpenAI path end to end: the real openai client over HTTP against a tiny
OpenAI-compatible server started in the test, driven by the in-process worker (DESIGN 5, 8):
the tools it asks for, its streamed answer, and the tool calls it may not make."""

import json

import pytest

from runs import deltas, worker
from runs.models import AttemptStatus, ModelAttempt, RunStatus, ToolExecution, ToolStatus
from tests.extension_app import parcels
from tests.runs.helpers import RecordingChannel, attempts
from tests.runs.openai_server import (
    USAGE,
    event_types,
    parcel_agent,
    pat_asks,
    release_with_tools,
    tool_results,
)

# The worker polls the run from the main thread while the model call waits in another one
# (DESIGN 5), so the tests commit for real instead of running inside one test transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def test_openai_run_calls_tool_and_completes_with_model_text(
    endpoint_shop, chat_server, openai_model
):
    # given: a model server that asks for track_parcel, then answers from its result
    server = chat_server(parcel_agent())
    openai_model(server)
    run = pat_asks(endpoint_shop)

    # when
    executed = worker.tick()

    # then: the run completed with the model's text
    assert executed == 1
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Parcel PCL-1 is in transit."
    assert run.model_calls == 2

    attempts = ModelAttempt.objects.filter(run=run).order_by("step", "attempt")
    assert [a.status for a in attempts] == [AttemptStatus.RESPONDED] * 2
    assert all(a.usage == USAGE for a in attempts)
    assert all(a.latency_ms is not None for a in attempts)

    execution = ToolExecution.objects.get(run=run)
    assert execution.tool == parcels.TRACK
    assert execution.args == {"parcel_id": "PCL-1"}
    assert execution.status == ToolStatus.SUCCEEDED
    assert execution.result["parcel_id"] == "PCL-1"

    # and the server saw the declared tools, the key, the model name and then the tool result
    assert len(server.requests) == 2
    first, second = server.requests
    assert first["model"] == "test-model"
    declared = {tool["function"]["name"] for tool in first["tools"]}
    assert declared == set(parcels.TOOLS)
    assert all(tool["type"] == "function" for tool in first["tools"])
    assert server.headers[0].get("authorization") == "Bearer sk-test-key"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0]["tool_call_id"] == "call_1"
    assert json.loads(tool_messages[0]["content"])["parcel_id"] == "PCL-1"
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["name"] == parcels.TRACK

    types = event_types(run)
    assert types.count("model.responded") == 2
    assert types.count("run.completed") == 1
    assert types[-1] == "run.completed"


@pytest.mark.parametrize("stream_deltas", [True, False], ids=["deltas-on", "deltas-off"])
def test_a_streamed_answer_is_published_as_deltas_unless_stream_deltas_is_off(
    endpoint_shop, chat_server, openai_model, settings, monkeypatch, stream_deltas
):
    # given: a streaming endpoint, a channel that records what is published, and the switch
    server = chat_server(parcel_agent())
    openai_model(server)
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "STREAM_DELTAS": stream_deltas}
    channel = RecordingChannel()
    monkeypatch.setattr(deltas, "channel", lambda: channel)
    run = pat_asks(endpoint_shop)

    # when
    worker.tick()

    # then: either way the client streamed both calls and the run completed with the answer
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Parcel PCL-1 is in transit."
    assert [body["stream"] for body in server.requests] == [True, True]
    if stream_deltas:
        # the answer's text, in order, under its call, whose end is marked (the call that
        # only asked for a tool wrote nothing to close)
        text = [m for m in channel.published if "text" in m]
        assert {m["run"] for m in channel.published} == {str(run.pk)}
        assert "".join(m["text"] for m in text) == run.result
        assert [m["seq"] for m in text] == list(range(1, len(text) + 1))
        assert len({m["gen"] for m in text}) == 1
        assert [m for m in channel.published if m.get("done")] == [
            {"run": str(run.pk), "gen": text[0]["gen"], "done": True}
        ]
    else:
        assert channel.published == []


@pytest.mark.parametrize(
    ("call", "expected_error"),
    [
        pytest.param(
            (parcels.LOCKER, json.dumps({"parcel_id": "PCL-1"})),
            "the tool find_locker is not available",
            id="registered-but-not-declared-by-the-release",
        ),
        pytest.param(
            ("wipe_all_parcels", "{}"),
            "the tool wipe_all_parcels is not available",
            id="unknown-tool",
        ),
        pytest.param(
            (parcels.TRACK, '{"parcel_id": "PCL-1"'),
            "arguments are not JSON",
            id="arguments-not-json",
        ),
        pytest.param(
            (parcels.TRACK, json.dumps({"parcel_id": "1; DROP TABLE"})),
            "invalid arguments",
            id="arguments-fail-validation",
        ),
    ],
)
def test_openai_bad_tool_call_gets_error_result_and_run_completes(
    endpoint_shop, chat_server, openai_model, call, expected_error
):
    # given: the release declares track_parcel only; the model sends a call it may not make
    release_with_tools(endpoint_shop, parcels.TRACK)
    server = chat_server(parcel_agent(call))
    openai_model(server)
    run = pat_asks(endpoint_shop)

    # when
    worker.tick()

    # then: the call was recorded FAILED with an error result the model was shown
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result.startswith("Sorry, I could not look that up")
    assert expected_error in run.result
    execution = ToolExecution.objects.get(run=run)
    assert execution.tool == call[0]
    assert execution.status == ToolStatus.FAILED
    assert expected_error in execution.result["error"]
    assert [name for name in (t["function"]["name"] for t in server.requests[0]["tools"])] == [
        parcels.TRACK
    ]
    assert tool_results(server.requests[1]) == [execution.result]
    assert [s for _, _, s in attempts(run.pk)] == [AttemptStatus.RESPONDED] * 2

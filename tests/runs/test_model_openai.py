"""The OpenAI path end to end: the real openai client over HTTP against a tiny
OpenAI-compatible server started in the test, driven by the in-process worker (DESIGN 5, 8)."""

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User

from approvals.bench.model_stub import completion_chunks
from runs import deltas, worker
from runs.models import (
    AgentRelease,
    AgentRun,
    AttemptStatus,
    ErrorCode,
    ModelAttempt,
    RunEvent,
    RunStatus,
    ToolExecution,
    ToolStatus,
)
from runs.releases import ReleaseManifest, ToolDeclaration, default_limits, graph_release_default
from tests import factories

# The worker polls the run from the main thread while the model call waits in another one
# (DESIGN 5), so the tests commit for real instead of running inside one test transaction.
pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}

# What the server sees and answers: answer(number, body) -> (http status, json body, delay).
Answer = Callable[[int, dict[str, Any]], tuple[int, dict[str, Any], float]]


class ChatServer:
    """An OpenAI-compatible POST /v1/chat/completions on 127.0.0.1, in a thread."""

    def __init__(self, answer: Answer):
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with owner._lock:
                    owner.requests.append(body)
                    owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                    number = len(owner.requests)
                status, payload, delay = owner.answer(number, body)
                if delay and owner.stopping.wait(delay):
                    return
                try:
                    if status == 200 and body.get("stream"):
                        self._stream(payload)
                        return
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (a timeout test)

            def _stream(self, payload: dict[str, Any]) -> None:
                """The completion as a streaming endpoint sends it (the connection closes
                after it: HTTP/1.0)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in completion_chunks(payload):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> "ChatServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_790_000_000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": USAGE,
    }


def tool_calls_reply(*calls: tuple[str, str]) -> dict[str, Any]:
    """A reply asking for tools; each call is (name, arguments as the model wrote them)."""
    return completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for index, (name, arguments) in enumerate(calls, start=1)
            ],
        },
        "tool_calls",
    )


def text_reply(text: str) -> dict[str, Any]:
    return completion({"role": "assistant", "content": text}, "stop")


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def order_agent(*calls: tuple[str, str]) -> Answer:
    """A model that asks for `calls` (default: lookup_order ORD-1001) until it sees a tool
    result, then answers naming what the tool returned."""
    calls = calls or (("lookup_order", json.dumps({"order_id": "ORD-1001"})),)

    def answer(number: int, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        results = tool_results(body)
        if not results:
            return 200, tool_calls_reply(*calls), 0
        found = [r for r in results if "order_id" in r]
        if found:
            text = f"Order {found[0]['order_id']} is {found[0]['status'].lower()}."
        else:
            text = "Sorry, I could not look that up: " + "; ".join(r["error"] for r in results)
        return 200, text_reply(text), 0

    return answer


def failing_first(times: int, then: Answer, *, status: int = 500) -> Answer:
    def answer(number: int, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        if number <= times:
            return status, {"error": {"message": "upstream broke", "type": "server_error"}}, 0
        return then(number - times, body)

    return answer


def always_failing(number: int, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
    return 500, {"error": {"message": "upstream broke", "type": "server_error"}}, 0


def too_slow(number: int, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
    return 200, text_reply("far too late"), 5.0


@pytest.fixture
def chat_server():
    servers: list[ChatServer] = []

    def start(answer: Answer) -> ChatServer:
        server = ChatServer(answer).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def openai_model(settings):
    """Point the runtime at a server: openai_model(server, timeout=...)."""

    def use(server: ChatServer, *, timeout: float = 10.0) -> None:
        settings.AGENTPORTAL = {
            **settings.AGENTPORTAL,
            "MODEL": "openai",
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-test-key",
            "OPENAI_MODEL": "test-model",
            "OPENAI_TIMEOUT_SECONDS": timeout,
            "MODEL_ATTEMPTS_PER_STEP": 2,
        }

    return use


def alice_run(demo, message: str = "What is the status of order ORD-1001?") -> AgentRun:
    alice = User.objects.get(username="alice")
    return factories.run_queue(customer=alice, merchant=demo, message=message)


def attempts_of(run: AgentRun) -> list[tuple[int, int, str]]:
    return list(
        ModelAttempt.objects.filter(run=run)
        .order_by("step", "attempt")
        .values_list("step", "attempt", "status")
    )


def event_types(run: AgentRun) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def test_openai_run_calls_tool_and_completes_with_model_text(demo, chat_server, openai_model):
    # given: a model server that asks for lookup_order, then answers from its result
    server = chat_server(order_agent())
    openai_model(server)
    run = alice_run(demo)

    # when
    executed = worker.tick()

    # then: the run completed with the model's text
    assert executed == 1
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Order ORD-1001 is delivered."
    assert run.model_calls == 2

    attempts = ModelAttempt.objects.filter(run=run).order_by("step", "attempt")
    assert [a.status for a in attempts] == [AttemptStatus.RESPONDED] * 2
    assert all(a.usage == USAGE for a in attempts)
    assert all(a.latency_ms is not None for a in attempts)

    execution = ToolExecution.objects.get(run=run)
    assert execution.tool == "lookup_order"
    assert execution.args == {"order_id": "ORD-1001"}
    assert execution.status == ToolStatus.SUCCEEDED
    assert execution.result["order_id"] == "ORD-1001"

    # and the server saw the declared tools, the key, the model name and then the tool result
    assert len(server.requests) == 2
    first, second = server.requests
    assert first["model"] == "test-model"
    declared = {tool["function"]["name"] for tool in first["tools"]}
    assert "lookup_order" in declared
    assert all(tool["type"] == "function" for tool in first["tools"])
    assert server.headers[0].get("authorization") == "Bearer sk-test-key"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0]["tool_call_id"] == "call_1"
    assert json.loads(tool_messages[0]["content"])["order_id"] == "ORD-1001"
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["name"] == "lookup_order"

    types = event_types(run)
    assert types.count("model.responded") == 2
    assert types.count("run.completed") == 1
    assert types[-1] == "run.completed"


class RecordingChannel:
    """A delta channel that keeps what it is given to publish."""

    broadcast = True

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []

    async def publish(self, messages: list[dict[str, Any]]) -> None:
        self.published.extend(messages)

    def publish_in_transaction(self, message: dict[str, Any]) -> None:
        self.published.append(message)


@pytest.mark.parametrize("stream_deltas", [True, False], ids=["deltas-on", "deltas-off"])
def test_a_streamed_answer_is_published_as_deltas_unless_stream_deltas_is_off(
    demo, chat_server, openai_model, settings, monkeypatch, stream_deltas
):
    # given: a streaming endpoint, a channel that records what is published, and the switch
    server = chat_server(order_agent())
    openai_model(server)
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "STREAM_DELTAS": stream_deltas}
    channel = RecordingChannel()
    monkeypatch.setattr(deltas, "channel", lambda: channel)
    run = alice_run(demo)

    # when
    worker.tick()

    # then: either way the client streamed both calls and the run completed with the answer
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Order ORD-1001 is delivered."
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


def test_openai_server_error_once_is_retried_as_a_second_attempt(demo, chat_server, openai_model):
    # given: the server fails the first call with a 500, then behaves
    server = chat_server(failing_first(1, order_agent()))
    openai_model(server)
    run = alice_run(demo)

    # when
    worker.tick()

    # then: the first step has one FAILED attempt, then a RESPONDED one; the run completes
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.result == "Order ORD-1001 is delivered."
    attempts = attempts_of(run)
    assert attempts[:2] == [(0, 1, AttemptStatus.FAILED), (0, 2, AttemptStatus.RESPONDED)]
    assert [status for _, _, status in attempts[2:]] == [AttemptStatus.RESPONDED]
    failed = ModelAttempt.objects.get(run=run, step=0, attempt=1)
    assert "500" in failed.error or "InternalServerError" in failed.error
    assert failed.usage == {}
    assert run.model_calls == 3  # a failed call counts against the budget
    assert len(server.requests) == 3
    assert event_types(run).count("model.failed") == 1
    assert ToolExecution.objects.filter(run=run).count() == 1


def test_openai_server_always_failing_fails_run_with_model_error(demo, chat_server, openai_model):
    # given
    server = chat_server(always_failing)
    openai_model(server)
    run = alice_run(demo)

    # when: tick returns normally; the failure is the run's, not the worker's
    worker.tick()

    # then: MODEL_ATTEMPTS_PER_STEP (2) FAILED attempts, then the run FAILED
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.MODEL_ERROR
    assert attempts_of(run) == [(0, 1, AttemptStatus.FAILED), (0, 2, AttemptStatus.FAILED)]
    assert len(server.requests) == 2
    assert run.model_calls == 2
    assert not ToolExecution.objects.filter(run=run).exists()
    types = event_types(run)
    assert types.count("model.failed") == 2
    assert types.count("run.failed") == 1
    assert types[-1] == "run.failed"
    failed_event = RunEvent.objects.get(run=run, type="run.failed")
    assert failed_event.data["error_code"] == ErrorCode.MODEL_ERROR


def test_an_unreachable_endpoint_fails_the_run_with_model_error_and_frees_its_slot(demo, settings):
    # given an endpoint where nothing listens
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    settings.AGENTPORTAL = {
        **settings.AGENTPORTAL,
        "MODEL": "openai",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port}/v1",
        "MODEL_ATTEMPTS_PER_STEP": 2,
    }
    run = alice_run(demo)

    # when a worker takes it
    worker.tick()

    # then both attempts failed, the run failed with MODEL_ERROR, and it holds no slot
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, ErrorCode.MODEL_ERROR)
    assert attempts_of(run) == [(0, 1, AttemptStatus.FAILED), (0, 2, AttemptStatus.FAILED)]
    assert "APIConnectionError" in run.error_detail
    assert run.finished_at is not None


def test_openai_timeout_fails_attempts_then_run_with_model_error(demo, chat_server, openai_model):
    # given: a server slower than the client's timeout
    server = chat_server(too_slow)
    openai_model(server, timeout=1.0)
    run = alice_run(demo)

    # when
    worker.tick()

    # then: each attempt timed out and FAILED, and the run FAILED with MODEL_ERROR
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_code == ErrorCode.MODEL_ERROR
    attempts = ModelAttempt.objects.filter(run=run).order_by("attempt")
    assert [(a.step, a.attempt, a.status) for a in attempts] == [
        (0, 1, AttemptStatus.FAILED),
        (0, 2, AttemptStatus.FAILED),
    ]
    for attempt in attempts:
        assert "timeout" in attempt.error.lower() or "timed out" in attempt.error.lower()
        assert attempt.latency_ms >= 900
        assert attempt.latency_ms < 4_000  # the client gave up; it did not wait for the server
    assert len(server.requests) == 2
    assert event_types(run)[-1] == "run.failed"


def publish_release_with_tools(merchant, *names: str) -> None:
    AgentRelease.objects.filter(merchant=merchant, published=True).update(published=False)
    latest = AgentRelease.objects.filter(merchant=merchant).order_by("-version").first()
    AgentRelease.objects.create(
        merchant=merchant,
        version=(latest.version + 1) if latest else 1,
        graph_version=graph_release_default().version,
        manifest=ReleaseManifest(
            tools=[ToolDeclaration(name=name) for name in names], limits=default_limits()
        ).model_dump(),
        published=True,
    )


@pytest.mark.parametrize(
    ("call", "expected_error"),
    [
        pytest.param(
            ("check_stock", json.dumps({"sku": "SHOE-TRAIL-42", "size": "43"})),
            "the tool check_stock is not available",
            id="registered-but-not-declared-by-the-release",
        ),
        pytest.param(
            ("wipe_all_orders", "{}"),
            "the tool wipe_all_orders is not available",
            id="unknown-tool",
        ),
        pytest.param(
            ("lookup_order", '{"order_id": "ORD-1001"'),
            "arguments are not JSON",
            id="arguments-not-json",
        ),
        pytest.param(
            ("lookup_order", json.dumps({"order_id": "1001; DROP TABLE"})),
            "invalid arguments",
            id="arguments-fail-validation",
        ),
    ],
)
def test_openai_bad_tool_call_gets_error_result_and_run_completes(
    demo, chat_server, openai_model, call, expected_error
):
    # given: the release declares lookup_order only; the model sends a call it may not make
    publish_release_with_tools(demo, "lookup_order")
    server = chat_server(order_agent(call))
    openai_model(server)
    run = alice_run(demo)

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
        "lookup_order"
    ]
    assert tool_results(server.requests[1]) == [execution.result]
    assert [s for _, _, s in attempts_of(run)] == [AttemptStatus.RESPONDED] * 2

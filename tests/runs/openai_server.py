"""A tiny OpenAI-compatible server started in the test, the model answers it gives, and a shop
whose release asks the model the settings name (here: that server, through the real openai
client)."""

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentportal.models import Merchant
from approvals.bench.model_stub import completion_chunks
from runs.models import AgentRun, RunEvent
from tests import factories
from tests.extension_app import parcels
from tests.runs.helpers import STATUS_QUESTION, queue

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


@contextmanager
def chat_servers() -> Iterator[Callable[[Answer], ChatServer]]:
    """start(answer) -> a running server; every one is stopped on the way out."""
    servers: list[ChatServer] = []

    def start(answer: Answer) -> ChatServer:
        servers.append(ChatServer(answer).start())
        return servers[-1]

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def openai_use(settings, server: ChatServer, *, timeout: float = 10.0) -> None:
    """Point the runtime's model at the server, two attempts a step."""
    settings.AGENTPORTAL = {
        **settings.AGENTPORTAL,
        "MODEL": "openai",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-key",
        "OPENAI_MODEL": "test-model",
        "OPENAI_TIMEOUT_SECONDS": timeout,
        "MODEL_ATTEMPTS_PER_STEP": 2,
    }


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


def parcel_agent(*calls: tuple[str, str]) -> Answer:
    """A model that asks for `calls` (default: track_parcel PCL-1) until it sees a tool
    result, then answers naming what the tool returned."""
    calls = calls or ((parcels.TRACK, json.dumps({"parcel_id": "PCL-1"})),)

    def answer(number: int, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        results = tool_results(body)
        if not results:
            return 200, tool_calls_reply(*calls), 0
        found = [r for r in results if "parcel_id" in r]
        if found:
            text = f"Parcel {found[0]['parcel_id']} is {found[0]['status']}."
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


def release_with_tools(shop: Merchant, *names: str) -> None:
    """A new published release of the shop declaring `names`, asking the model the settings
    name."""
    factories.release_publish(merchant=shop, model="default", tools=list(names))


def openai_shop(parcel_shop: Merchant) -> Merchant:
    """The parcel shop, its release declaring both parcel tools and asking the model the
    settings name instead of playing the parcels script."""
    release_with_tools(parcel_shop, *parcels.TOOLS)
    return parcel_shop


def pat_asks(shop: Merchant, question: str = STATUS_QUESTION) -> AgentRun:
    """pat's question about parcel PCL-1, queued."""
    return queue(shop.memberships.get(user__username="pat").user, shop, "PCL-1", question)


def event_types(run: AgentRun) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))

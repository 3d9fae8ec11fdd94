"""An OpenAI-compatible endpoint on loopback for the benchmark and the tests: POST
/v1/chat/completions answers after `latency` seconds, like the scripted model would (a tool
call, then text) or with text at once, and counts the calls it holds. It can also answer 429
with Retry-After for a while, as a busy endpoint does. Asked to stream, it sends the answer
as server-sent chunks (text a word at a time) spread over the latency, as a model writes, and
notes when each answer's first word went out.

It runs on an event loop in a thread of its own, so that hundreds of calls can wait at once.
`python -m approvals.bench.model_stub --port P --latency S [--text-only]` runs it as a process
of its own (an outside endpoint, as a real model's is): it prints its base URL once it listens,
and what it served as one JSON line when it is stopped (SIGTERM or SIGINT).
"""

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from runs.extensions import DEFAULT_SCRIPT
from runs.scripted import ScriptedModel


class ModelStub:
    def __init__(
        self, *, latency: float, text_only: bool = False, script: str = DEFAULT_SCRIPT
    ) -> None:
        # `script`: the scripted model's script the endpoint plays (runs.extensions).
        self.latency, self.text_only, self.script = latency, text_only, script
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        # Seconds from each streamed answer's start to its first word being sent.
        self.first_words: list[float] = []
        self.throttled = 0
        self.throttle_seconds = 0.0
        self.throttle_until: float | None = None
        self.throttle_retry_after = 1
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self, port: int = 0) -> "ModelStub":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", port, backlog=4096), self._loop
        ).result()
        return self

    @property
    def base_url(self) -> str:
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    def throttle(self, *, seconds: float, retry_after: int = 1) -> None:
        """Answer 429 with Retry-After for `seconds` from the next call on (from the call, not
        from now: a cluster that is slow to start still meets the refusals)."""
        self.throttle_retry_after = retry_after
        self.throttle_seconds, self.throttle_until = seconds, None

    def _throttling(self) -> bool:
        now = time.monotonic()
        if self.throttle_until is None and self.throttle_seconds:
            self.throttle_until = now + self.throttle_seconds
        return self.throttle_until is not None and now < self.throttle_until

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                path, body = request
                if body.get("stream") and path == "/v1/chat/completions":
                    if await self._stream(writer, body):
                        continue
                    return
                status, body, headers = await self._answer(path, body)
                data = json.dumps(body).encode()
                head = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}"]
                head += [f"{name}: {value}" for name, value in headers.items()]
                head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            # stop() cancels the handlers; one that ends cancelled makes Python 3.11's stream
            # callback log the cancellation as an error, so the handler ends quietly instead.
            return
        finally:
            writer.close()

    async def _answer(self, path: str, body: dict[str, Any]):
        if path != "/v1/chat/completions":
            return 404, {"error": {"message": "not found"}}, {}
        if self._throttling():
            self.throttled += 1
            retry = {"Retry-After": str(self.throttle_retry_after)}
            return 429, {"error": {"message": "slow down", "type": "rate_limit"}}, retry
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        return 200, self._completion(body), {}

    async def _stream(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> bool:
        """Answer with chunks (HTTP chunked encoding); False when throttled (the connection
        is then closed after the 429)."""
        if self._throttling():
            self.throttled += 1
            data = json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode()
            writer.write(
                (
                    "HTTP/1.1 429 Too Many Requests\r\n"
                    f"Retry-After: {self.throttle_retry_after}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                ).encode()
                + data
            )
            await writer.drain()
            return True
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            chunks = completion_chunks(self._completion(body))
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            pause = self.latency / max(1, len(chunks) - 1)
            started, worded = time.monotonic(), False
            for chunk in chunks:
                await asyncio.sleep(pause if chunk["choices"] else 0)
                data = f"data: {json.dumps(chunk)}\n\n".encode()
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()
                if not worded and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    self.first_words.append(time.monotonic() - started)
                    worded = True
            done = b"data: [DONE]\n\n"
            writer.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
            await writer.drain()
        finally:
            self.in_flight -= 1
        return True

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.text_only:
            message: dict[str, Any] = {"role": "assistant", "content": "Done: all is in order."}
        else:
            answer = ScriptedModel(self.script).complete(
                messages=body["messages"], tools=body.get("tools", [])
            )
            message = answer.as_message()
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }


def completion_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat completion as the chunks a streaming endpoint sends: its text a word at a time,
    each tool call whole, then the finish and a last chunk with the usage alone."""
    message = completion["choices"][0]["message"]
    finish = completion["choices"][0].get("finish_reason", "stop")
    base = {key: completion[key] for key in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    words = (message.get("content") or "").split(" ")
    for index, word in enumerate(words):
        if word or index:
            chunks.append(chunk({"content": word if index == 0 else " " + word}))
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}))
    chunks.append(chunk({}, finish))
    chunks.append({**base, "choices": [], "usage": completion.get("usage")})
    return chunks


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, Any]] | None:
    line = await reader.readline()
    if not line:
        return None
    _, path, _ = line.decode().split(" ", 2)
    length = 0
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    payload = await reader.readexactly(length) if length else b"{}"
    return path, json.loads(payload)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m approvals.bench.model_stub", description=__doc__
    )
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds an answer takes")
    parser.add_argument("--text-only", action="store_true", help="answer with text at once")
    options = parser.parse_args(argv)
    if not options.text_only:
        # The scripted answers play the script the domain registers as Django starts.
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentportal.settings")
        django.setup()
    stub = ModelStub(latency=options.latency, text_only=options.text_only).start(options.port)
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    print(stub.base_url, flush=True)
    while not stopped.wait(1):
        pass
    stub.stop()
    words = stub.first_words
    served = {
        "calls": stub.calls,
        "max_in_flight": stub.max_in_flight,
        "first_word_ms_p50": round(statistics.median(words) * 1000, 1) if words else None,
    }
    print(json.dumps(served), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

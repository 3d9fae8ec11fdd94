"""`python -m approvals.bench.model_stub`: the stub endpoint as a process of its own, the outside
endpoint the side-by-side benchmark gives both sides; the real openai client streams from it."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[3]
LOOKUP_ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up one of the customer's orders by its number.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}


@contextmanager
def stub_process(*args: str) -> Iterator[tuple[str, dict]]:
    """The stub started with `args`; yields its base URL and, once the block is over, holds
    what it said it served (filled in after it stopped)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "approvals.bench.model_stub",
            "--port",
            "0",
            "--latency",
            "0.05",
            *args,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    served: dict = {}
    try:
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:"), process.stderr.read()
        yield base_url, served
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=30)
    served.update(json.loads(errors.strip().splitlines()[-1]))


def _stream(base_url: str, **kwargs):
    client = openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
    with client:
        return list(
            client.chat.completions.create(
                model="stub", stream=True, stream_options={"include_usage": True}, **kwargs
            )
        )


def test_the_stub_process_streams_an_answer_to_the_openai_client():
    with stub_process("--text-only") as (base_url, served):
        chunks = _stream(base_url, messages=[{"role": "user", "content": "Hello"}])

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Done: all is in order."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert chunks[-1].usage.total_tokens == 15
    assert served["calls"] == 1


def test_the_stub_process_answers_like_the_scripted_model_with_a_tool_call():
    question = {"role": "user", "content": "What is the status of order ORD-1001?"}
    with stub_process() as (base_url, served):
        chunks = _stream(base_url, messages=[question], tools=[LOOKUP_ORDER])

    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert [call.function.name for call in calls] == ["lookup_order"]
    assert json.loads(calls[0].function.arguments) == {"order_id": "ORD-1001"}
    assert served["calls"] == 1

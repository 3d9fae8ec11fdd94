"""The offline scripted model: a deterministic stand-in for an LLM, so that the demo and the
tests run without a network. It plays whatever script the domain registered
(runs.extensions.script_register) on what the conversation says so far."""

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from runs import extensions
from runs.llm import DeltaSink, Messages, ModelResponse, ToolCall, ToolSchemas
from runs.tools import TOOLS, Policy


@dataclass(frozen=True)
class Transcript:
    """What a conversation says so far, as a script reads it.

    `text`: the customer's latest message, followed by their answer to the agent's question
    when there is one. `said`: everything the customer said, newest first (the answer first).
    `results`: the results of the tools called since the latest message, by tool name (the
    last, when a tool was called more than once); `all_results`: all of them, in order.
    """

    text: str
    said: list[str]
    results: dict[str, dict[str, Any]]
    calls_so_far: int
    all_results: dict[str, list[dict[str, Any]]]

    @classmethod
    def read(cls, messages: list[dict[str, Any]]) -> "Transcript":
        user_indexes = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        last_user = user_indexes[-1] if user_indexes else -1
        said = [str(messages[index].get("content") or "") for index in reversed(user_indexes)]
        names_by_call: dict[str, str] = {}
        results: dict[str, dict[str, Any]] = {}
        all_results: dict[str, list[dict[str, Any]]] = {}
        calls_so_far = 0
        for index, message in enumerate(messages):
            for part in message.get("tool_calls") or []:
                calls_so_far += 1
                names_by_call[part["id"]] = part["function"]["name"]
            if index > last_user and message.get("role") == "tool":
                name = names_by_call.get(message.get("tool_call_id"), "")
                try:
                    results[name] = json.loads(message.get("content") or "{}")
                except ValueError:
                    results[name] = {"error": str(message.get("content"))}
                all_results.setdefault(name, []).append(results[name])
        text = said[0] if said else ""
        answer = next(
            (result.get("answer") for name, result in results.items() if _asks(name)), None
        )
        if answer:
            # The customer's answer to the agent's question is part of what they said.
            text = f"{text}\n{answer}"
            said = [str(answer), *said]
        return cls(
            text=text,
            said=said,
            results=results,
            calls_so_far=calls_so_far,
            all_results=all_results,
        )


def _asks(tool_name: str) -> bool:
    """Whether the tool asks the customer a question: its result holds their answer."""
    tool = TOOLS.get(tool_name)
    return tool is not None and tool.policy == Policy.CLARIFICATION


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class ScriptedModel:
    """Reads the conversation like a model would and answers with the registered script's
    next move: a text, a call of one of the tools declared to it, or several calls in one turn.

    With AGENTPORTAL_SCRIPTED_STREAM_MS above 0 it writes its text a word at a time, that many
    milliseconds apart, awaited on the worker's event loop like a real model (so the demo
    shows an answer growing); with 0 it answers at once, inline.
    """

    def __init__(self, script_name: str = extensions.DEFAULT_SCRIPT) -> None:
        self.script = extensions.script(script_name)
        self.word_seconds = settings.AGENTPORTAL["SCRIPTED_STREAM_MS"] / 1000
        self.waits = self.word_seconds > 0

    async def acomplete(
        self, *, messages: Messages, tools: ToolSchemas, deltas: DeltaSink | None = None
    ) -> ModelResponse:
        response = self.complete(messages=messages, tools=tools)
        for index, word in enumerate((response.content or "").split(" ")):
            await asyncio.sleep(self.word_seconds)
            if deltas is not None:
                await deltas.add(word if index == 0 else " " + word)
        return response

    def complete(self, *, messages: Messages, tools: ToolSchemas) -> ModelResponse:
        declared = {tool["function"]["name"] for tool in tools}
        transcript = Transcript.read(messages)
        move = self.script(transcript, declared)
        prompt_tokens = sum(_tokens(str(message.get("content") or "")) for message in messages)
        if isinstance(move, str):
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": _tokens(move)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            return ModelResponse(content=move, usage=usage)
        moves = move if isinstance(move, list) else [move]
        calls = [
            ToolCall(
                id=f"call_{transcript.calls_so_far + number}",
                name=name,
                arguments=json.dumps(arguments),
            )
            for number, (name, arguments) in enumerate(moves, start=1)
        ]
        written = sum(_tokens(call.arguments) for call in calls)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": written}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return ModelResponse(content=None, tool_calls=calls, usage=usage)

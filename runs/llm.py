"""Model clients: the offline scripted model (runs.scripted) and any OpenAI-compatible endpoint."""

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai
from django.conf import settings

from runs.extensions import DEFAULT_SCRIPT


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


class ModelClient(Protocol):
    # True when a call waits on the network: the worker then runs it in a thread and keeps
    # polling the run for cancellation.
    blocking: bool

    def complete(
        self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelResponse: ...


class OpenAIChatModel:
    """Chat completions with tools on any OpenAI-compatible endpoint.

    The SDK's own retries are off: a failed call is a failed ModelAttempt, and the runtime
    decides whether to try again (and counts it against the run's budget).
    """

    blocking = True

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float):
        self.model = model
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0
        )

    def complete(
        self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelResponse:
        try:
            started = time.monotonic()
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
            if tools:
                kwargs["tools"] = tools
            completion = self.client.chat.completions.create(**kwargs)
        except openai.APIError as error:
            elapsed = time.monotonic() - started
            raise ModelError(f"{type(error).__name__} after {elapsed:.1f}s: {error}") from error
        if not completion.choices:
            raise ModelError("the model answered without a choice")
        message = completion.choices[0].message
        tool_calls = [
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
            for call in (message.tool_calls or [])
            if call.type == "function"
        ]
        usage = {}
        if completion.usage is not None:
            usage = {
                "prompt_tokens": completion.usage.prompt_tokens,
                "completion_tokens": completion.usage.completion_tokens,
                "total_tokens": completion.usage.total_tokens,
            }
        if not tool_calls and not message.content:
            raise ModelError("the model answered with neither text nor a tool call")
        return ModelResponse(content=message.content, tool_calls=tool_calls, usage=usage)


def model_client_for(manifest: dict[str, Any]) -> ModelClient:
    name = manifest.get("model", "default")
    if name == "default":
        name = settings.AGENTPORTAL["MODEL"]
    if name == "openai":
        config = settings.AGENTPORTAL
        return OpenAIChatModel(
            base_url=config["OPENAI_BASE_URL"],
            api_key=config["OPENAI_API_KEY"],
            model=config["OPENAI_MODEL"],
            timeout=config["OPENAI_TIMEOUT_SECONDS"],
        )
    from runs.scripted import ScriptedModel  # it imports this module

    _, _, script_name = name.partition("scripted:")
    return ScriptedModel(script_name or DEFAULT_SCRIPT)

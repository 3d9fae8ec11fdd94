"""Model clients: the offline scripted after-sales model and any OpenAI-compatible endpoint."""

import json
import re
import time
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import openai
from django.conf import settings


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


ORDER_ID = re.compile(r"\bORD-\d+\b", re.IGNORECASE)
AMOUNT = re.compile(r"\bamount\s*[:=]?\s*(\d+(?:\.\d{1,2})?)", re.IGNORECASE)
SIZE = re.compile(r"\bsize\s*[:=]?\s*(\d+(?:\.\d)?)", re.IGNORECASE)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class ScriptedModel:
    """A deterministic stand-in for an LLM that plays the after-sales script of DESIGN 8.

    It reads the conversation like a model would: the customer's latest message decides the
    intent, and the tool results since then decide the next move. It only calls tools that are
    declared to it.
    """

    blocking = False

    def complete(
        self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelResponse:
        declared = {tool["function"]["name"] for tool in tools}
        turn = _Turn.read(messages)
        move = self._next_move(turn, declared)
        prompt_tokens = sum(_tokens(str(message.get("content") or "")) for message in messages)
        if isinstance(move, str):
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": _tokens(move)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            return ModelResponse(content=move, usage=usage)
        name, arguments = move
        call = ToolCall(
            id=f"call_{turn.calls_so_far + 1}", name=name, arguments=json.dumps(arguments)
        )
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": _tokens(call.arguments)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return ModelResponse(content=None, tool_calls=[call], usage=usage)

    def _next_move(self, turn: "_Turn", declared: set[str]) -> str | tuple[str, dict]:
        text = turn.text.lower()
        if turn.order_id is None:
            if "request_clarification" in declared and "request_clarification" not in turn.results:
                return ("request_clarification", {"question": "Which order is this about?"})
            return "Which order is this about? Please tell me its number, like ORD-1001."

        def call(name: str, arguments: dict) -> tuple[str, dict] | str:
            if name not in declared:
                return f"I can't do that here: {name.replace('_', ' ')} is not available to me."
            return (name, arguments)

        order_id = turn.order_id
        if "follow up" in text or "follow-up" in text or "followup" in text:
            if "create_followup_request" not in turn.results:
                return call(
                    "create_followup_request", {"order_id": order_id, "note": turn.text[:500]}
                )
            return _followup_answer(order_id, turn.results["create_followup_request"])

        if "lookup_order" not in turn.results:
            return call("lookup_order", {"order_id": order_id})
        order = turn.results["lookup_order"]
        if "error" in order:
            return f"I could not find order {order_id}: {order['error']}"

        if "refund" in text:
            if "issue_refund" not in turn.results:
                amount = _amount(turn.text) or order.get("refundable", "0.00")
                return call(
                    "issue_refund",
                    {"order_id": order_id, "amount": str(amount), "reason": "customer request"},
                )
            return _refund_answer(order_id, turn.results["issue_refund"])

        size = SIZE.search(turn.text)
        if "exchange" in text and size and order.get("items"):
            item = order["items"][0]
            if "check_exchange_eligibility" not in turn.results:
                return call(
                    "check_exchange_eligibility",
                    {"order_id": order_id, "sku": item["sku"], "new_size": size.group(1)},
                )
            eligibility = turn.results["check_exchange_eligibility"]
            if not eligibility.get("eligible"):
                reason = eligibility.get("reason") or eligibility.get("error") or "not eligible"
                return f"Order {order_id} cannot be exchanged: {reason}."
            if "create_exchange_proposal" not in turn.results:
                return call(
                    "create_exchange_proposal",
                    {
                        "order_id": order_id,
                        "items": [
                            {
                                "sku": item["sku"],
                                "new_sku": eligibility["new_sku"],
                                "quantity": item.get("quantity", 1),
                            }
                        ],
                    },
                )
            return _proposal_answer(order_id, turn.results["create_exchange_proposal"])

        if "stock" in text and order.get("items"):
            item = order["items"][0]
            if "check_stock" not in turn.results:
                wanted = size.group(1) if size else item.get("size", "")
                return call("check_stock", {"sku": item["sku"], "size": str(wanted)})
            return _stock_answer(order_id, turn.results["check_stock"])

        return _order_answer(order)


@dataclass
class _Turn:
    text: str
    order_id: str | None
    results: dict[str, dict]
    calls_so_far: int

    @classmethod
    def read(cls, messages: list[dict[str, Any]]) -> "_Turn":
        user_indexes = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        last_user = user_indexes[-1] if user_indexes else -1
        text = str(messages[last_user].get("content") or "") if last_user >= 0 else ""
        order_id = None
        for index in reversed(user_indexes):
            found = ORDER_ID.search(str(messages[index].get("content") or ""))
            if found:
                order_id = found.group(0).upper()
                break
        names_by_call: dict[str, str] = {}
        results: dict[str, dict] = {}
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
        answer = results.get("request_clarification", {}).get("answer")
        if answer:
            # The customer's answer to the agent's question is part of what they said.
            text = f"{text}\n{answer}"
            found = ORDER_ID.search(str(answer))
            if found:
                order_id = found.group(0).upper()
        return cls(text=text, order_id=order_id, results=results, calls_so_far=calls_so_far)


def _amount(text: str) -> str | None:
    found = AMOUNT.search(text)
    if not found:
        return None
    try:
        return str(Decimal(found.group(1)).quantize(Decimal("0.01")))
    except InvalidOperation:
        return None


def _order_answer(order: dict) -> str:
    items = ", ".join(
        f"{item['name']} (size {item['size']}) x {item['quantity']}" for item in order["items"]
    )
    return (
        f"Order {order['order_id']} is {order['status'].lower()}. It holds {items}; "
        f"total {order['total']}, of which {order['refundable']} can still be refunded."
    )


def _refund_answer(order_id: str, result: dict) -> str:
    status = result.get("status")
    if status == "executed":
        return f"Done: a refund of {result.get('amount')} for order {order_id} has been issued."
    if status == "rejected":
        return (
            f"A supervisor declined the refund for order {order_id}: "
            f"{result.get('reason') or 'no reason given'}."
        )
    if status == "expired":
        return (
            f"Nobody could approve the refund for order {order_id} in time, so nothing was "
            "refunded. Please ask again and we will take another look."
        )
    return f"The refund for order {order_id} did not go through: {result.get('error', status)}."


def _proposal_answer(order_id: str, result: dict) -> str:
    if "error" in result:
        return f"I could not prepare an exchange for order {order_id}: {result['error']}."
    status = result.get("status")
    if status == "approved":
        return (
            f"Your exchange for order {order_id} is approved: {result.get('summary', '')}. "
            "We will send the new item as soon as we receive the old one."
        )
    if status == "rejected":
        return (
            f"A supervisor declined the exchange for order {order_id}: "
            f"{result.get('note') or 'no reason given'}."
        )
    if status == "cancelled":
        return f"The exchange plan for order {order_id} was cancelled; nothing will change."
    return (
        f"I have prepared an exchange plan for order {order_id}: {result.get('summary', '')}. "
        "Please confirm it; a supervisor will then approve it."
    )


def _followup_answer(order_id: str, result: dict) -> str:
    if "error" in result:
        return f"I could not register a follow-up for order {order_id}: {result['error']}."
    return f"A colleague will follow up on order {order_id} by {result.get('due_at', 'soon')}."


def _stock_answer(order_id: str, result: dict) -> str:
    if "error" in result:
        return f"I could not check the stock for order {order_id}: {result['error']}."
    return (
        f"For order {order_id}: {result['in_stock']} of {result['sku']} in size "
        f"{result['size']} in stock."
    )


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
    return ScriptedModel()

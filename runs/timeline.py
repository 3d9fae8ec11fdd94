"""A run's events as sentences a person reads: what the model was asked and asked for, what
each tool answered, who decided. The portal's call page and the admin's run page show them."""

from collections.abc import Callable
from datetime import UTC, datetime

from runs.extensions import ExtensionError
from runs.models import RunEvent
from runs.tools import TOOLS

# A tool's answer is shown up to this many characters; the admin keeps the whole payload.
SHOWN_CHARACTERS = 240


def value_words(value) -> str:
    if isinstance(value, dict):
        # By name: PostgreSQL's jsonb does not keep the order the keys were written in.
        return ", ".join(
            f"{key.replace('_', ' ')} {value_words(item)}" for key, item in sorted(value.items())
        )
    if isinstance(value, list):
        if all(isinstance(item, str | int | float) for item in value):
            return ", ".join(map(str, value))
        return f"{len(value)} item{'s' if len(value) != 1 else ''}"
    return str(value)


def shortened(text: str) -> str:
    return text if len(text) <= SHOWN_CHARACTERS else text[: SHOWN_CHARACTERS - 1] + "…"


def at_words(value: str) -> str:
    """An ISO time of an event's data, to the second in UTC."""
    parsed = datetime.fromisoformat(value) if value else None
    return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if parsed else ""


def _model_responded(data: dict) -> str:
    calls = data.get("tool_calls") or []
    said = f"The model asked to call {', '.join(calls)}" if calls else "The model answered"
    usage = data.get("usage") or {}
    tokens = usage.get("total_tokens")
    details = [f"{tokens} tokens" if tokens is not None else "", f"{data.get('latency_ms')} ms"]
    return f"{said} ({', '.join(detail for detail in details if detail)})"


def _tool_result(data: dict) -> str:
    status = str(data.get("status", "")).lower()
    result = data.get("result")
    if status == "failed" and isinstance(result, dict) and result.get("error"):
        # Why it failed is the news; what else the result holds is in the admin.
        return f"{data.get('tool', 'The tool')} failed: {shortened(str(result['error']))}"
    answer = f": {shortened(value_words(result))}" if result not in (None, {}, "") else ""
    return f"{data.get('tool', 'The tool')} {status}{answer}"


SENTENCES: dict[str, Callable[[dict], str]] = {
    "run.queued": lambda data: "Queued",
    "run.started": lambda data: f"A worker took the run (lease {data.get('lease')})",
    "model.requested": lambda data: f"Asked the model (step {data.get('step')})",
    "model.responded": _model_responded,
    "tool.started": lambda data: f"Calling {data.get('tool')}",
    "tool.result": _tool_result,
    "message.assistant": lambda data: f"Answered: “{shortened(data.get('text', ''))}”",
    "run.completed": lambda data: "Completed",
    "run.failed": lambda data: f"Failed ({data.get('error_code')}): {data.get('detail', '')}",
    "run.cancelled": lambda data: f"Cancelled: {data.get('reason') or 'no reason given'}",
    "run.parked": lambda data: f"Parked for an operator: {data.get('reason', '')}",
    "run.unparked": lambda data: "Handed back to the workers by an operator",
}


# A domain's sentence for its own events: it gets the event's data and the name of the person
# who decided the event's interrupt, for readers who may know (None otherwise).
DomainSentence = Callable[[dict, str | None], str]
_DOMAIN_SENTENCES: dict[str, DomainSentence] = {}


def timeline_sentence_register(event_type: str, sentence: DomainSentence) -> None:
    """Teach the timeline a domain's event type; each type is said by one app only."""
    if event_type in SENTENCES or event_type in _DOMAIN_SENTENCES:
        raise ExtensionError(f"the timeline says {event_type!r} already")
    _DOMAIN_SENTENCES[event_type] = sentence


def event_sentence(event: RunEvent, *, decided_by: dict[str, str] | None = None) -> str:
    """What the event says, in words. `decided_by` names the person who decided each
    interrupt, for readers who may know (the event itself keeps it private)."""
    data = event.data or {}
    domain_sentence = _DOMAIN_SENTENCES.get(event.type)
    if domain_sentence is not None:
        return domain_sentence(data, (decided_by or {}).get(data.get("interrupt_id", "")))
    sentence = SENTENCES.get(event.type)
    if sentence is not None:
        return sentence(data)
    return f"{event.type}: {shortened(value_words(data))}" if data else event.type


def progress_of(event: RunEvent | None) -> str:
    """What a running run is doing, for the person waiting: the words of the tool it calls,
    or nothing (the page says the answer is being written)."""
    if event is None or event.type != "tool.started":
        return ""
    tool = TOOLS.get(event.data.get("tool", ""))
    return tool.progress if tool and tool.progress else "Working on it…"


def run_timeline(run, *, decided_by: dict[str, str] | None = None) -> list[dict]:
    """The run's events in order, each with its sentence."""
    return [
        {"event": event, "sentence": event_sentence(event, decided_by=decided_by)}
        for event in run.events.order_by("seq")
    ]

"""Read queries for runs. They open no transaction."""

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce

from agentportal.models import Merchant
from agentportal.principals import Principal
from runs import extensions
from runs.models import (
    FINISHED_STATUSES,
    AgentRun,
    Conversation,
    ConversationMessage,
    MessageStatus,
    RunEvent,
    RunInput,
    RunStatus,
)
from runs.services.statements import occupying_count


def runs_visible_to(principal: Principal) -> QuerySet[AgentRun]:
    """A customer sees their own runs; supervisors and service keys their merchant's."""
    runs = AgentRun.objects.filter(merchant=principal.merchant)
    if principal.is_customer:
        runs = runs.filter(account=principal.user)
    return runs


def run_for(principal: Principal, run_id) -> AgentRun | None:
    return runs_visible_to(principal).filter(pk=run_id).first()


def run_pending(run: AgentRun) -> list[dict[str, Any]]:
    """What the run waits for, as `pending` items: those its interrupts keep themselves (an
    approval's call), then its wait state's. Every item has every wait kind's fields."""
    items: list[dict[str, Any]] = []
    for interrupt in extensions.interrupts():
        if interrupt.pending is not None:
            items.extend(interrupt.pending(run))
    wait = run.wait
    if wait is not None:
        items.append(
            {
                "interrupt_id": wait.interrupt_id,
                "kind": wait.kind,
                "tool_name": wait.tool_name,
                "tool_args": wait.tool_args,
                "expires_at": run.wait_deadline_at,
                **{name: getattr(wait.payload, name) for name in _own_fields(wait.kind)},
            }
        )
    blank = dict.fromkeys(pending_field_names())
    return [{**blank, **item} for item in items]


def _own_fields(kind_name: str) -> list[str]:
    kind = extensions.wait_kind(kind_name)
    return list(kind.pending_fields) if kind is not None else []


def pending_field_names() -> list[str]:
    """The fields the wait kinds add to every pending item."""
    return [name for kind in extensions.wait_kinds() for name in kind.pending_fields]


def run_end_notices(run_ids: list) -> dict[Any, list[str]]:
    """What the ends of these runs did to the items they owned, in plain words, by run: the
    `notice` of the events the run-end hooks reported."""
    return _event_texts(run_ids, Q(data__has_key="notice"), "notice")


def run_questions(run_ids: list) -> dict[Any, list[str]]:
    """The questions these runs asked their customers, oldest first, by run: they stay part of
    the conversation after they were answered."""
    return _event_texts(run_ids, Q(type="input.requested"), "question")


def _event_texts(run_ids: list, which: Q, key: str) -> dict[Any, list[str]]:
    """The `key` of the data of these runs' events `which` selects, oldest first, by run."""
    texts: dict[Any, list[str]] = {}
    if not run_ids:
        return texts
    events = (
        RunEvent.objects.filter(which, run_id__in=run_ids)
        .order_by("run_id", "seq")
        .values_list("run_id", "data")
    )
    for run_id, data in events:
        texts.setdefault(run_id, []).append(data.get(key, ""))
    return texts


def run_receipt(*, run: AgentRun, idempotency_key: str) -> RunInput | None:
    """The receipt a key left on a run, whoever's key it was (the newest, should two
    principals have used the same key)."""
    return (
        RunInput.objects.filter(run=run, idempotency_key=idempotency_key)
        .order_by("-created_at", "-pk")
        .first()
    )


class InvalidCursor(ValueError):
    pass


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cursor_pattern(model: type[models.Model]) -> str:
    """What every cursor of `model`'s pages looks like (the schema states it): microseconds
    since 1970 and the row's key. Any string like it is a place in the list, so none is
    refused once it matches."""
    key = "[0-9a-f]{32}" if isinstance(model._meta.pk, models.UUIDField) else "[0-9]{1,18}"
    return f"^([0-9]{{1,16}})_({key})$"


def cursor_encode(created_at: datetime, pk: Any) -> str:
    micros = (created_at - EPOCH) // timedelta(microseconds=1)
    return f"{micros}_{pk.hex if isinstance(pk, uuid.UUID) else pk}"


def page_newest_first(
    queryset: QuerySet, *, cursor: str | None, size: int
) -> tuple[list[Any], str | None]:
    """Keyset pagination on (created_at, pk), newest first: constant cost at any depth."""
    queryset = queryset.order_by("-created_at", "-pk")
    if cursor is not None:
        place = re.search(cursor_pattern(queryset.model), cursor)
        if place is None:
            raise InvalidCursor("the cursor is not one this API gave out")
        created_at = EPOCH + timedelta(microseconds=int(place[1]))
        queryset = queryset.filter(
            Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=place[2])
        )
    rows = list(queryset[: size + 1])
    next_cursor = (
        cursor_encode(rows[size - 1].created_at, rows[size - 1].pk) if len(rows) > size else None
    )
    return rows[:size], next_cursor


def run_events_after(*, run: AgentRun, after: int, limit: int = 500) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit])


# Runs per statement, within every database's limit on a statement's parameters.
RUNS_PER_READ = 200


def runs_events_since(cursors: dict[Any, int]) -> dict[Any, tuple[list[RunEvent], bool]]:
    """For each run id -> seq in `cursors` that has news: its events after that seq, and
    whether it is finished. Runs with nothing new are left out; two statements per
    RUNS_PER_READ runs that changed, one per RUNS_PER_READ that did not."""
    ids = list(cursors)
    news: dict[Any, tuple[list[RunEvent], bool]] = {}
    for start in range(0, len(ids), RUNS_PER_READ):
        rows = AgentRun.objects.filter(pk__in=ids[start : start + RUNS_PER_READ]).values_list(
            "pk", "last_event_seq", "status"
        )
        # The status and the last seq are read together: a run's final event commits with
        # its final status, so every event of a run read as finished is there to read next.
        changed = {}
        for run_id, last_seq, status in rows:
            if last_seq > cursors[run_id] or status in FINISHED_STATUSES:
                changed[run_id] = status in FINISHED_STATUSES
                news[run_id] = ([], changed[run_id])
        if not changed:
            continue
        after = Q()
        for run_id in changed:
            after |= Q(run_id=run_id, seq__gt=cursors[run_id])
        for event in RunEvent.objects.filter(after).order_by("run_id", "seq"):
            news[event.run_id][0].append(event)
    return news


def conversations_visible_to(principal: Principal) -> QuerySet[Conversation]:
    """A customer sees their own conversations; supervisors and service keys their shop's."""
    conversations = Conversation.objects.filter(merchant=principal.merchant).select_related(
        "merchant", "customer"
    )
    if principal.is_customer:
        conversations = conversations.filter(customer=principal.user)
    return conversations


def runs_latest_events(run_ids) -> dict:
    """By run: its latest event (what it is doing now), in one query."""
    latest = RunEvent.objects.filter(run_id__in=run_ids, seq=F("run__last_event_seq"))
    return {event.run_id: event for event in latest}


def conversation_messages(conversation: Conversation) -> QuerySet[ConversationMessage]:
    return ConversationMessage.objects.filter(conversation=conversation).order_by(
        "created_at", "pk"
    )


@dataclass(frozen=True)
class TranscriptLine:
    speaker: str  # "customer" or "assistant"
    text: str
    at: datetime
    # Said of a customer's message that never reached the agent, or has not yet.
    note: str = ""


# The last lines of a long conversation are what a decision needs; older ones are left out.
TRANSCRIPT_LINES = 60
# What the assistant says to the customer: its answers and its questions.
_SAID_BY_ASSISTANT = {"message.assistant": "text", "input.requested": "question"}
_NOT_RUN = {
    MessageStatus.CANCELLED: "never reached the assistant",
    MessageStatus.QUEUED: "waiting its turn",
    MessageStatus.HELD: "held while a person took over",
}


def run_transcript(run: AgentRun) -> list[TranscriptLine]:
    """What the customer and the assistant said, oldest first: the whole conversation of a
    run that belongs to one (every run of it), else the run's own messages and answers."""
    if run.conversation_id is not None:
        messages = ConversationMessage.objects.filter(conversation_id=run.conversation_id)
        customer = [
            TranscriptLine("customer", m.text, m.created_at, _NOT_RUN.get(m.status, ""))
            for m in messages.order_by("-created_at", "-pk")[:TRANSCRIPT_LINES]
        ]
        events = RunEvent.objects.filter(run__conversation_id=run.conversation_id)
    else:
        # A run started alone: its first messages came with it; answers are its inputs.
        customer = [
            TranscriptLine("customer", str(m.get("content", "")), run.created_at)
            for m in run.messages
            if m.get("role") == "user"
        ]
        answers = RunInput.objects.filter(run=run, payload__has_key="text")
        customer += [
            TranscriptLine("customer", str(a.payload["text"]), a.created_at)
            for a in answers.order_by("-created_at")[:TRANSCRIPT_LINES]
        ]
        events = RunEvent.objects.filter(run=run)
    assistant = [
        TranscriptLine("assistant", str(e.data.get(_SAID_BY_ASSISTANT[e.type], "")), e.created_at)
        for e in events.filter(type__in=_SAID_BY_ASSISTANT).order_by("-created_at", "-pk")[
            :TRANSCRIPT_LINES
        ]
    ]
    # On a tie the customer spoke first: the assistant answers what it was told.
    lines = sorted(customer + assistant, key=lambda line: (line.at, line.speaker != "customer"))
    return lines[-TRANSCRIPT_LINES:]


# How long a shop with room may leave a run queued before /healthz calls its queue stalled.
QUEUE_STALLED_AFTER = timedelta(minutes=1)


def queues_stalled(now) -> list[str]:
    """The shops whose queue has not moved for QUEUE_STALLED_AFTER although a run waits and
    they have room: no worker claimed from them in that time (workers down, or stuck)."""
    since = now - QUEUE_STALLED_AFTER
    waiting = AgentRun.objects.filter(
        merchant=models.OuterRef("pk"), status=RunStatus.QUEUED, updated_at__lt=since
    )
    stalled = (
        Merchant.objects.filter(active=True)
        .filter(Q(last_scheduled_at__isnull=True) | Q(last_scheduled_at__lt=since))
        .filter(models.Exists(waiting))
        .annotate(occupied=Coalesce(occupying_count(), 0))
        .filter(occupied__lt=models.F("max_running_runs"))
    )
    return list(stalled.order_by("slug").values_list("slug", flat=True))

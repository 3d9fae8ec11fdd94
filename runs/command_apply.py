"""A control command applied to a conversation (DESIGN 7): inside the request, never behind
the agent's queue or a worker, its policies in the one order (the session, the pending
messages, the active run), then its reply. runs.commands holds the commands themselves.

Lock order: Membership -> Conversation -> AgentRun.
"""

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agentportal import errors
from agentportal.principals import Principal
from runs import locks, services
from runs.conversations import open_run_slot, start_next_locked
from runs.models import (
    AgentRun,
    Conversation,
    ConversationMessage,
    ConversationStatus,
    MessageStatus,
    RunStatus,
)


def switch_target(conversation: Conversation, argument: str) -> Conversation:
    """The conversation `/switch <id>` names: another of the same customer's in the same
    shop. InvalidInput without a well-formed id; NotFound for anyone else's."""
    try:
        target_id = uuid.UUID(argument.strip())
    except ValueError:
        raise errors.InvalidInput(
            "Name the conversation to switch to: /switch <conversation id>.",
            errors=[{"field": "text", "message": "/switch needs a conversation id"}],
        ) from None
    target = Conversation.objects.filter(
        pk=target_id, merchant_id=conversation.merchant_id, customer_id=conversation.customer_id
    ).first()
    if target is None:
        raise errors.NotFound("No such conversation of yours.")
    return target


def _cancel_active_locked(conversation: Conversation, reason: str) -> AgentRun | None:
    """Cancel the conversation's active run. Call holding the conversation's lock."""
    if conversation.active_run_id is None:
        return None
    run = locks.run_lock_in_conversation(conversation.active_run_id)
    if run.is_finished:
        return None
    change = services.RunChange(run)
    change.finish(RunStatus.CANCELLED, ("run.cancelled", {"reason": reason}))
    services.run_finish_locked(run, change)
    conversation.refresh_from_db(fields=["active_run"])
    return run


@dataclass
class CommandOutcome:
    """What a command's policies did, for its reply."""

    conversation: Conversation
    principal: Principal
    argument: str = ""
    cancelled_run: AgentRun | None = None
    detached_run: AgentRun | None = None
    dropped: int = 0
    requeued: int = 0
    current: Conversation | None = None


def _session_apply(command, outcome: CommandOutcome) -> None:
    """The session policy, first: a conversation taken over or closed before its run is
    cancelled, so that the run's end starts nothing more in it."""
    conversation = outcome.conversation
    if command.session == "take_over":
        Conversation.objects.filter(pk=conversation.pk).update(
            status=ConversationStatus.TAKEN_OVER, control_version=F("control_version") + 1
        )
        conversation.refresh_from_db()
        # A worker holding the old control version can commit nothing more to these runs.
        AgentRun.objects.filter(
            conversation=conversation, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]
        ).update(control_version=conversation.control_version)
    elif command.session == "new":
        Conversation.objects.filter(pk=conversation.pk).update(
            status=ConversationStatus.CLOSED, closed_at=timezone.now()
        )
        conversation.refresh_from_db()
        # In the closed one's place: /new never meets the open-conversations limit.
        outcome.current = Conversation.objects.create(
            merchant=conversation.merchant, customer=conversation.customer
        )
    elif command.session == "open":
        Conversation.objects.filter(pk=conversation.pk).update(status=ConversationStatus.OPEN)
        conversation.refresh_from_db()
    elif command.session == "switch":
        target = Conversation.objects.get(pk=outcome.current.pk)
        if target.status != ConversationStatus.OPEN:
            raise errors.ConversationClosed("That conversation is not open; pick an open one.")
        Conversation.objects.filter(pk=target.pk).update(current_since=timezone.now())
        outcome.current = target
        active = conversation.active_run_id
        outcome.detached_run = AgentRun.objects.filter(pk=active).first() if active else None


def _pending_apply(command, outcome: CommandOutcome) -> None:
    conversation = outcome.conversation
    waiting = ConversationMessage.objects.filter(conversation=conversation)
    if command.pending == "drop":
        # A new generation: whatever was queued before it never runs.
        Conversation.objects.filter(pk=conversation.pk).update(
            queue_generation=F("queue_generation") + 1
        )
        conversation.refresh_from_db()
        outcome.dropped = waiting.filter(
            status__in=[MessageStatus.QUEUED, MessageStatus.HELD]
        ).update(status=MessageStatus.CANCELLED)
    elif command.pending == "hold":
        waiting.filter(status=MessageStatus.QUEUED).update(status=MessageStatus.HELD)
    elif command.pending == "requeue":
        outcome.requeued = waiting.filter(
            status=MessageStatus.HELD, generation=conversation.queue_generation
        ).update(status=MessageStatus.QUEUED)


def _active_run_apply(command, outcome: CommandOutcome) -> None:
    conversation = outcome.conversation
    if command.active_run == "cancel":
        outcome.cancelled_run = _cancel_active_locked(
            conversation, f"{command.name} by {outcome.principal.public_name}"
        )
    if (
        conversation.status == ConversationStatus.OPEN
        and conversation.active_run_id is None
        and command.pending == "requeue"
        and open_run_slot(conversation)
    ):
        start_next_locked(conversation)


def command_run(
    *, conversation: Conversation, principal: Principal, command, argument: str = ""
) -> dict[str, Any]:
    """Run a bypass command inside the request, never behind the agent's queue or a worker:
    one transaction, the customer's Membership then the conversation locked first, its
    policies applied in the one order (session, pending messages, active run), then its reply.
    A CLOSED conversation is final: every command but a read-only one is refused."""
    outcome = CommandOutcome(conversation=conversation, principal=principal, argument=argument)
    if command.read_only:
        return command.reply(outcome)
    if conversation.status == ConversationStatus.CLOSED:
        # Refused before the argument is looked at (checked again under the lock below).
        raise errors.ConversationClosed("This conversation was closed; use the new one.")
    if command.session == "switch":
        outcome.current = switch_target(conversation, argument)
    with transaction.atomic():
        services.membership_lock(merchant=conversation.merchant, account=conversation.customer)
        if outcome.current is not None:
            # Two conversations: locked in the order of their ids, so that two switches the
            # other way round cannot deadlock.
            locks.conversations_lock([conversation.pk, outcome.current.pk])
        outcome.conversation = locks.conversation_lock(conversation.pk)
        if outcome.conversation.status == ConversationStatus.CLOSED:
            raise errors.ConversationClosed("This conversation was closed; use the new one.")
        _session_apply(command, outcome)
        _pending_apply(command, outcome)
        _active_run_apply(command, outcome)
        return command.reply(outcome)

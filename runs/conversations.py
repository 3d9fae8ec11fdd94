"""Conversations: messages start runs one at a time, wait in a queue meanwhile, and control
commands act on them at once (DESIGN 7). Every change goes through here.

Lock order: Membership -> Conversation -> AgentRun. A function that must be called holding a
lock says so.
"""

from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agentportal import errors
from agentportal.models import Merchant
from agentportal.principals import Principal
from runs import inputs, locks, services
from runs.models import (
    AgentRun,
    Conversation,
    ConversationMessage,
    ConversationStatus,
    MessageStatus,
    RunStatus,
)

HISTORY_TURNS = 10


def conversation_create(*, merchant: Merchant, customer) -> Conversation:
    return Conversation.objects.create(merchant=merchant, customer=customer)


def _history(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation so far, as the model sees it: earlier questions and answers."""
    started = (
        ConversationMessage.objects.filter(
            conversation=conversation, status=MessageStatus.STARTED, run__isnull=False
        )
        .select_related("run")
        .order_by("-created_at")[:HISTORY_TURNS]
    )
    history: list[dict[str, Any]] = []
    messages = list(reversed(list(started)))
    for index, message in enumerate(messages):
        history.append({"role": "user", "content": message.text})
        # A run that asked a question and got its answer spans two messages: answered once.
        answered_later = index + 1 < len(messages) and messages[index + 1].run_id == message.run_id
        if message.run.result and not answered_later:
            history.append({"role": "assistant", "content": message.run.result})
    return history


def _start_locked(conversation: Conversation, message: ConversationMessage) -> AgentRun:
    """Start a run for a message. Call holding the conversation's lock, when it has no
    active run."""
    run = services.run_insert_locked(
        merchant=conversation.merchant,
        account=conversation.customer,
        messages=[*_history(conversation), {"role": "user", "content": message.text}],
        release=services.release_resolve(merchant=conversation.merchant),
        conversation=conversation,
    )
    taken = Conversation.objects.filter(pk=conversation.pk, active_run__isnull=True).update(
        active_run=run
    )
    if taken != 1:
        raise transaction.TransactionManagementError("conversation changed under its lock")
    conversation.active_run = run
    message.status, message.run = MessageStatus.STARTED, run
    message.save(update_fields=["status", "run"])
    return run


def message_send(*, conversation: Conversation, text: str) -> ConversationMessage:
    """Plain text from the customer: start a run, or wait behind the active one."""
    with transaction.atomic():
        services.membership_lock(merchant=conversation.merchant, account=conversation.customer)
        conversation = locks.conversation_lock(conversation.pk)
        if conversation.status == ConversationStatus.CLOSED:
            raise errors.ConversationClosed("This conversation was closed; use the new one.")
        message = ConversationMessage(
            conversation=conversation,
            text=text,
            generation=conversation.queue_generation,
            status=MessageStatus.QUEUED,
        )
        if conversation.status == ConversationStatus.TAKEN_OVER:
            message.status = MessageStatus.HELD
        message.save()
        if message.status == MessageStatus.QUEUED and conversation.active_run_id is None:
            services.open_runs_check(merchant=conversation.merchant, account=conversation.customer)
            _start_locked(conversation, message)
        elif message.status == MessageStatus.QUEUED:
            _answer_locked(conversation, message)
    return message


def _answer_locked(conversation: Conversation, message: ConversationMessage) -> None:
    """A message to an agent that asked the customer a question is the answer: it resumes
    the active run instead of waiting behind it. Call holding the conversation's lock."""
    run = locks.run_lock_in_conversation(conversation.active_run_id)
    wait = inputs.clarification_pending_locked(run)
    if wait is None:
        return
    inputs.input_resume_locked(
        run,
        wait=wait,
        text=message.text,
        # A space: no client's Idempotency-Key can take this receipt's key.
        idempotency_key=f"chat message {message.pk}",
        request_hash="",
        author=conversation.customer.get_username(),
    )
    message.status, message.run = MessageStatus.STARTED, run
    message.save(update_fields=["status", "run"])


def conversation_on_run_finish(run: AgentRun, previous_status: str) -> None:
    """The transaction that ends a run frees its conversation and starts the next message.

    Called by the runtime holding the conversation's and the run's locks. The account's
    open-run limit needs no recount: this run's end and the next one's start commit together.
    """
    if run.conversation_id is None:
        return
    Conversation.objects.filter(pk=run.conversation_id, active_run_id=run.pk).update(
        active_run=None
    )
    conversation = Conversation.objects.select_related("merchant", "customer").get(
        pk=run.conversation_id
    )
    if conversation.status == ConversationStatus.OPEN and conversation.active_run_id is None:
        _start_next_locked(conversation)


def _start_next_locked(conversation: Conversation) -> AgentRun | None:
    """Call holding the conversation's lock. Stale-generation messages are cancelled."""
    ConversationMessage.objects.filter(
        conversation=conversation, status=MessageStatus.QUEUED
    ).exclude(generation=conversation.queue_generation).update(status=MessageStatus.CANCELLED)
    following = (
        ConversationMessage.objects.filter(
            conversation=conversation,
            status=MessageStatus.QUEUED,
            generation=conversation.queue_generation,
        )
        .order_by("created_at", "pk")
        .first()
    )
    return _start_locked(conversation, following) if following else None


# --- control commands -----------------------------------------------------------------------


def pending_count(conversation: Conversation) -> int:
    return ConversationMessage.objects.filter(
        conversation=conversation, status__in=[MessageStatus.QUEUED, MessageStatus.HELD]
    ).count()


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


def command_stop(conversation: Conversation, principal: Principal) -> dict[str, Any]:
    """Cancel the active run; the queue is kept (its next message starts)."""
    run = _cancel_active_locked(conversation, f"/stop by {principal.name}")
    return {
        "cancelled_run_id": str(run.pk) if run else None,
        "pending_messages": pending_count(conversation),
    }


def command_new(conversation: Conversation, principal: Principal) -> dict[str, Any]:
    """Start over: drop the queue, cancel the active run, close this conversation and open a
    new one."""
    Conversation.objects.filter(pk=conversation.pk).update(
        queue_generation=F("queue_generation") + 1,
        status=ConversationStatus.CLOSED,
        closed_at=timezone.now(),
    )
    conversation.refresh_from_db()
    dropped = ConversationMessage.objects.filter(
        conversation=conversation, status__in=[MessageStatus.QUEUED, MessageStatus.HELD]
    ).update(status=MessageStatus.CANCELLED)
    run = _cancel_active_locked(conversation, f"/new by {principal.name}")
    fresh = conversation_create(merchant=conversation.merchant, customer=conversation.customer)
    return {
        "conversation_id": str(fresh.pk),
        "cancelled_run_id": str(run.pk) if run else None,
        "dropped_messages": dropped,
    }


def command_status(conversation: Conversation, principal: Principal) -> dict[str, Any]:
    from runs.serializers import RunSerializer

    run = AgentRun.objects.filter(pk=conversation.active_run_id).first()
    return {
        "active_run": RunSerializer(run).data if run else None,
        "pending_messages": pending_count(conversation),
    }


def command_takeover(conversation: Conversation, principal: Principal) -> dict[str, Any]:
    """A person takes the conversation: the agent's run is cancelled, and no worker holding
    the old control version can commit anything more to it."""
    Conversation.objects.filter(pk=conversation.pk).update(
        status=ConversationStatus.TAKEN_OVER, control_version=F("control_version") + 1
    )
    conversation.refresh_from_db()
    ConversationMessage.objects.filter(
        conversation=conversation, status=MessageStatus.QUEUED
    ).update(status=MessageStatus.HELD)
    AgentRun.objects.filter(
        conversation=conversation, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]
    ).update(control_version=conversation.control_version)
    run = _cancel_active_locked(conversation, f"/takeover by {principal.name}")
    return {
        "cancelled_run_id": str(run.pk) if run else None,
        "control_version": conversation.control_version,
    }


def command_release(conversation: Conversation, principal: Principal) -> dict[str, Any]:
    """Back to the agent: held messages queue again, and the first one starts."""
    Conversation.objects.filter(pk=conversation.pk).update(status=ConversationStatus.OPEN)
    conversation.refresh_from_db()
    requeued = ConversationMessage.objects.filter(
        conversation=conversation,
        status=MessageStatus.HELD,
        generation=conversation.queue_generation,
    ).update(status=MessageStatus.QUEUED)
    if conversation.active_run_id is None:
        _start_next_locked(conversation)
    return {"requeued_messages": requeued}


def command_run(*, conversation: Conversation, principal: Principal, command) -> dict[str, Any]:
    """Run a bypass command inside the request: one transaction, the conversation locked
    first, never behind the agent's queue or a worker."""
    if command.read_only:
        return command.handler(conversation, principal)
    with transaction.atomic():
        conversation = locks.conversation_lock(conversation.pk)
        return command.handler(conversation, principal)

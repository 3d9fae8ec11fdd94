"""Conversations: messages start runs one at a time, wait in a queue meanwhile, and control
commands act on them at once (DESIGN 7). Every change goes through here.

Lock order: Membership -> Conversation -> AgentRun. A function that must be called holding a
lock says so.
"""

from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef

from agentportal import errors
from agentportal.models import Merchant
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
    """A new open conversation, unless the customer already has their limit of open ones;
    counted under the customer's Membership lock, so that racing requests cannot both pass."""
    with transaction.atomic():
        services.membership_lock(merchant=merchant, account=customer)
        limit = settings.AGENTPORTAL["MAX_OPEN_CONVERSATIONS_PER_CUSTOMER"]
        open_now = (
            Conversation.objects.filter(merchant=merchant, customer=customer)
            .exclude(status=ConversationStatus.CLOSED)
            .count()
        )
        if open_now >= limit:
            raise errors.TooManyOpenConversations(
                f"You already have {open_now} open conversations; carry on in one of them "
                "(/new in one starts afresh in its place)."
            )
        return Conversation.objects.create(merchant=merchant, customer=customer)


def _queued_messages_check(conversation: Conversation) -> None:
    """TooManyQueuedMessages when the customer has their limit of messages waiting behind
    busy runs, in all their conversations. Call holding the customer's Membership lock."""
    limit = settings.AGENTPORTAL["MAX_QUEUED_MESSAGES_PER_CUSTOMER"]
    waiting = ConversationMessage.objects.filter(
        conversation__merchant=conversation.merchant,
        conversation__customer=conversation.customer,
        status__in=[MessageStatus.QUEUED, MessageStatus.HELD],
    ).count()
    if waiting >= limit:
        raise errors.TooManyQueuedMessages(
            f"{waiting} of your messages are already waiting for the agent; wait for its "
            "answer (or /stop) before sending more."
        )


def _history(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation so far, as the model sees it: earlier questions and answers."""
    # Only the current generation: /reset starts the agent's context afresh.
    started = (
        ConversationMessage.objects.filter(
            conversation=conversation,
            status=MessageStatus.STARTED,
            run__isnull=False,
            generation=conversation.queue_generation,
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
        if conversation.active_run_id is not None or (
            conversation.status == ConversationStatus.TAKEN_OVER
        ):
            _queued_messages_check(conversation)
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
    open-run limit needs no recount: this run's end and the next one's start commit together;
    except for a parked run, which no longer counted: maintain starts the next message of its
    conversation once the customer has a slot.
    """
    if run.conversation_id is None:
        return
    Conversation.objects.filter(pk=run.conversation_id, active_run_id=run.pk).update(
        active_run=None
    )
    conversation = Conversation.objects.select_related("merchant", "customer").get(
        pk=run.conversation_id
    )
    if (
        conversation.status == ConversationStatus.OPEN
        and conversation.active_run_id is None
        and previous_status != RunStatus.PARKED
    ):
        start_next_locked(conversation)


def start_next_locked(conversation: Conversation) -> AgentRun | None:
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


def conversations_start_waiting() -> int:
    """`maintain`'s sweep: start the next message of open conversations that wait for one of
    their customer's open-run slots (a message queued again by /release while the customer
    had their limit of runs open). Returns how many started."""
    waiting = (
        Conversation.objects.filter(status=ConversationStatus.OPEN, active_run__isnull=True)
        .filter(
            Exists(
                ConversationMessage.objects.filter(
                    conversation=OuterRef("pk"),
                    status=MessageStatus.QUEUED,
                    generation=OuterRef("queue_generation"),
                )
            )
        )
        .values_list("pk", flat=True)
    )
    started = 0
    for conversation_id in list(waiting[:500]):
        try:
            started += _start_waiting(conversation_id)
        except errors.NotAllowed:
            continue  # the customer is no longer a member: their messages stay queued
    return started


def _start_waiting(conversation_id) -> int:
    with transaction.atomic():
        conversation = Conversation.objects.select_related("merchant", "customer").get(
            pk=conversation_id
        )
        services.membership_lock(merchant=conversation.merchant, account=conversation.customer)
        conversation = locks.conversation_lock(conversation_id)
        if (
            conversation.status == ConversationStatus.OPEN
            and conversation.active_run_id is None
            and open_run_slot(conversation)
        ):
            return int(start_next_locked(conversation) is not None)
    return 0


# --- control commands -----------------------------------------------------------------------


def pending_count(conversation: Conversation) -> int:
    return ConversationMessage.objects.filter(
        conversation=conversation, status__in=[MessageStatus.QUEUED, MessageStatus.HELD]
    ).count()


def open_run_slot(conversation: Conversation) -> bool:
    """Whether the customer may start one more run. Call holding their Membership lock."""
    try:
        services.open_runs_check(merchant=conversation.merchant, account=conversation.customer)
    except errors.TooManyOpenRuns:
        return False
    return True

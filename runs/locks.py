"""Every row lock the runtime takes, in the one order DESIGN gives:
Merchant -> Membership -> Conversation -> AgentRun -> the domain's rows (approvals.locks).
Several rows of one kind are locked in the order of their ids (the claim locks its shops so).

Call these inside a transaction. On PostgreSQL each takes a row lock on its own table only
(`of=("self",)`, so a joined row is never locked with it); on SQLite select_for_update() does
nothing and the IMMEDIATE transaction already holds the database's write lock, so a
conditional UPDATE must still decide every transition.
"""

from django.db import OperationalError, connection, transaction

from agentportal.models import Membership, Merchant
from runs.models import AgentRun, Conversation


def merchant_lock(merchant_id: int) -> Merchant:
    return Merchant.objects.select_for_update(of=("self",)).get(pk=merchant_id)


def membership_lock(*, merchant: Merchant, account) -> Membership | None:
    """The account's active membership of the merchant, locked; None when it has none."""
    return (
        Membership.objects.select_for_update(of=("self",))
        .filter(user=account, merchant=merchant, active=True)
        .first()
    )


def conversation_lock(conversation_id) -> Conversation:
    """A conversation, locked, with its merchant and customer read (not locked) alongside."""
    return (
        Conversation.objects.select_for_update(of=("self",))
        .select_related("merchant", "customer")
        .get(pk=conversation_id)
    )


def conversations_lock(conversation_ids) -> None:
    """Several conversations, locked in the order of their ids."""
    list(
        Conversation.objects.select_for_update(of=("self",))
        .filter(pk__in=sorted(conversation_ids))
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def conversation_lock_nowait(conversation_id) -> bool:
    """Lock a conversation out of the lock order (after its run), so only without waiting: it
    can then never deadlock. False when someone else holds it."""
    try:
        with transaction.atomic():
            Conversation.objects.select_for_update(nowait=True, of=("self",)).filter(
                pk=conversation_id
            ).first()
    except OperationalError:
        return False
    return True


def run_lock(run_id) -> AgentRun:
    """Lock a run, and its conversation first when it has one."""
    conversation_id = (
        AgentRun.objects.filter(pk=run_id).values_list("conversation_id", flat=True).first()
    )
    if conversation_id is not None:
        Conversation.objects.select_for_update(of=("self",)).filter(pk=conversation_id).first()
    return run_lock_in_conversation(run_id)


def run_lock_in_conversation(run_id) -> AgentRun:
    """Lock a run whose conversation the caller holds locked already (or that has none)."""
    return AgentRun.objects.select_for_update(of=("self",)).get(pk=run_id)


def row_lock_clause(*, no_key: bool = False, skip_locked: bool = False) -> str:
    """The clause that makes a hand-written SELECT take row locks: FOR [NO KEY] UPDATE
    [SKIP LOCKED] where the database has row locks, "" on SQLite (where the IMMEDIATE
    transaction already holds the write lock). For the claim's raw statements."""
    if not connection.features.has_select_for_update:
        return ""
    return connection.ops.for_update_sql(skip_locked=skip_locked, no_key=no_key)

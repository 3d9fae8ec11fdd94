"""What the customer's chat shows beside each message, in the customer's words: where the
message stands, the question the assistant asked (also once answered), who decides a request
that waits for the shop and until when, and what they decided. Read queries only."""

import itertools

from approvals import customer_words, selectors
from approvals.models import TICKET_OPEN_STATUSES, Approval, ApprovalStatus, Ticket
from runs import selectors as run_selectors
from runs.models import Conversation, MessageStatus, RunStatus
from runs.timeline import progress_of


def chat_context(conversation: Conversation | None) -> dict:
    # Read before the rows: a change in between is then shown, and heard again.
    digest = selectors.chat_digest(conversation=conversation)
    rows = (
        list(run_selectors.conversation_messages(conversation).select_related("run"))
        if conversation
        else []
    )
    running = [row.run_id for row in rows if row.run and not row.run.is_finished]
    latest = run_selectors.runs_latest_events(running) if running else {}
    for row in rows:
        row.progress = progress_of(latest.get(row.run_id))
        row.answered_later = False
    for row, following in itertools.pairwise(rows):
        # The customer answered the agent's question: the run's answer shows once, last.
        row.answered_later = row.run_id is not None and following.run_id == row.run_id
    run_ids = [row.run_id for row in rows if row.run_id]
    # A run's questions in the order they were asked, as its answered rows come.
    questions = {
        run_id: iter(asked) for run_id, asked in run_selectors.run_questions(run_ids).items()
    }
    notices = run_selectors.run_end_notices(
        [row.run_id for row in rows if row.run and row.run.is_finished]
    )
    decisions, waiting = _decisions_and_waits(conversation, run_ids) if rows else ({}, {})
    for row in rows:
        row.standing = customer_words.MESSAGE_STANDING.get(row.status, "")
        row.question = next(questions.get(row.run_id, iter(())), "") if row.answered_later else ""
        row.notices = decisions.get(row.run_id, []) + notices.get(row.run_id, [])
        row.waiting = (
            waiting.get(row.run_id)
            if row.run and row.run.status == RunStatus.WAITING_APPROVAL
            else None
        )
        # Where the answer being written shows (approvals.portal.live_answers): in the row of each
        # message that may still be answered, also once stopped (its text stays, greyed).
        row.answer_slot = not row.answered_later and (
            not row.run.result
            if row.run
            else row.status in (MessageStatus.QUEUED, MessageStatus.HELD)
        )
        row.ended = bool(row.run and row.run.is_finished)
    return {
        "conversation": conversation,
        "shop": conversation.merchant.name if conversation else "",
        "rows": rows,
        "digest": digest,
    }


def _decisions_and_waits(conversation: Conversation, run_ids: list) -> tuple[dict, dict]:
    """By run: what a person of the shop decided that the customer must hear, and what
    waits for such a person (what, until when, whether we will email the customer)."""
    shop = conversation.merchant.name
    email = conversation.customer.email
    approvals = list(Approval.objects.filter(run_id__in=run_ids).order_by("created_at", "pk"))
    currencies = customer_words.currencies_of(approvals)
    decisions: dict = {}
    pending: dict = {}
    for approval in approvals:
        currency = customer_words.currency_of(approval, currencies)
        told = customer_words.decision_told(approval, currency, shop)
        if told:
            decisions.setdefault(approval.run_id, []).append(told)
        if approval.status == ApprovalStatus.PENDING_APPROVAL:
            pending.setdefault(approval.run_id, []).append((approval, currency))
    # Calls asked for together wait together: each is named, the first deadline is the one.
    waiting: dict = {
        run_id: {
            "what": customer_words.calls_described(calls),
            "several": len(calls) > 1,
            "until": min(approval.expires_at for approval, _ in calls),
            "email": email,
        }
        for run_id, calls in pending.items()
    }
    plans = Ticket.objects.filter(run_id__in=run_ids, status__in=TICKET_OPEN_STATUSES)
    for ticket in plans.select_related("order", "run"):
        waiting.setdefault(
            ticket.run_id,
            {
                "what": f"your exchange plan for {ticket.order.number}",
                "until": ticket.run.wait_deadline_at,
                "email": None,
            },
        )
    return decisions, waiting

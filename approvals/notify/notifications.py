"""Telling supervisors that a call or a plan waits for them (a signed webhook and an email to
each), operators that a call was escalated, and customers what a person of the shop decided
about their request. Each message goes through the outbox (approvals.notify.outbox): written in the
transaction of the news, sent after its commit.
"""

from django.conf import settings
from django.urls import reverse

from agentportal.models import Merchant, Role
from agentportal.selectors import supervisor_memberships
from approvals import customer_words
from approvals.models import Approval, ApprovalStatus, Transport
from approvals.notify.outbox import delivery_queue


def approval_requested_notify(*, approval: Approval) -> None:
    """Queue the notifications of a new pending call. Call inside the transaction that writes
    the Approval."""
    _supervisors_notify(
        merchant=approval.merchant,
        event="approval.requested",
        payload={
            "interrupt_id": approval.interrupt_id,
            "run_id": str(approval.run_id),
            "tool_name": approval.tool_name,
            "tool_args": approval.proposed_args,
            "expires_at": approval.expires_at.isoformat(),
        },
        subject=f"Approval needed: {approval.tool_name} ({approval.interrupt_id})",
        body=(
            f"The agent wants to run {approval.tool_name} with:\n"
            f"{_arguments_text(approval.proposed_args)}\n\n"
            f"Decide before {approval.expires_at:%Y-%m-%d %H:%M} UTC:\n"
            f"{_portal_link('portal-approval', interrupt_id=approval.interrupt_id)}"
        ),
    )


def approval_escalated_notify(*, approval: Approval) -> None:
    """Queue the notifications of a call escalated by its policy: a signed webhook
    `approval.escalated`, and an email to the shop's operators and the policy's address. Call
    inside the transaction that marks it escalated."""
    rules = approval.policy_version
    recipients = [rules.escalate_to_email] if rules and rules.escalate_to_email else []
    if rules is None or rules.escalate_to_operators:
        recipients += [
            membership.user.email
            for membership in supervisor_memberships(merchant=approval.merchant)
            if membership.role == Role.OPERATOR and membership.user.email
        ]
    waited = int((approval.escalated_at - approval.created_at).total_seconds() // 60)
    _webhook_queue(
        merchant=approval.merchant,
        event="approval.escalated",
        payload={
            "interrupt_id": approval.interrupt_id,
            "run_id": str(approval.run_id),
            "tool_name": approval.tool_name,
            "tool_args": approval.proposed_args,
            "waiting_since": approval.created_at.isoformat(),
            "escalated_at": approval.escalated_at.isoformat(),
            "expires_at": approval.expires_at.isoformat(),
        },
    )
    _emails_queue(
        merchant=approval.merchant,
        event="approval.escalated",
        recipients=recipients,
        subject=f"Escalated: {approval.tool_name} waits for a decision ({approval.interrupt_id})",
        body=(
            f"Nobody has decided this call for {waited} minutes. The agent wants to run "
            f"{approval.tool_name} with:\n{_arguments_text(approval.proposed_args)}\n\n"
            f"It expires at {approval.expires_at:%Y-%m-%d %H:%M} UTC:\n"
            f"{_portal_link('portal-approval', interrupt_id=approval.interrupt_id)}"
        ),
    )


def plan_waits_for_supervisor_notify(
    *, merchant: Merchant, ticket_id, run_id, proposal_version: int, summary: str, note: str
) -> None:
    """Queue the notifications of a plan that now needs a supervisor: confirmed by its
    customer (review it), or with changes asked for (`note`: propose a new version). Call
    inside the transaction that moves the run to the review."""
    action = "asked for changes: " + note if note else "confirmed the plan"
    _supervisors_notify(
        merchant=merchant,
        event="plan.review_requested",
        payload={
            "ticket_id": str(ticket_id),
            "run_id": str(run_id),
            "proposal_version": proposal_version,
            "summary": summary,
            "changes_requested": note or None,
        },
        subject=f"Exchange plan waiting for you (v{proposal_version})",
        body=(
            f"The customer {action}.\nPlan: {summary}\n"
            f"{_portal_link('portal-ticket', ticket_id=ticket_id)}"
        ),
    )


def approval_decided_notify(*, approval_id: int) -> None:
    """Queue the email that tells the customer how their call was decided: approved, changed,
    declined, or not decided in time; and, in a second email, an approved call the tool then
    refused. Call inside the transaction that records it; the same news is never written
    twice (the row's key)."""
    approval = Approval.objects.select_related("merchant", "run__account").get(pk=approval_id)
    customer = approval.run.account
    if not customer.email:
        return
    currency = customer_words.currency_of(approval, customer_words.currencies_of([approval]))
    subject, news = customer_words.decision_email(approval, currency, approval.merchant.name)
    news_of = "refused" if approval.status == ApprovalStatus.FAILED else "decision"
    delivery_queue(
        merchant=approval.merchant,
        transport=Transport.EMAIL,
        event=f"customer.{news_of}",
        key=f"{news_of}:{approval.interrupt_id}",
        recipient=customer.email,
        subject=subject,
        payload={
            "body": (
                f"Hello {customer.get_username()},\n\n{news}\n\n"
                f"Your conversation with the assistant: {_portal_link('portal-chat')}\n\n"
                f"{approval.merchant.name}"
            )
        },
    )


def _portal_link(name: str, **kwargs) -> str:
    """An absolute link to a portal page, which a mail client can follow."""
    return settings.AGENTPORTAL["SITE_URL"] + reverse(name, kwargs=kwargs)


def _arguments_text(arguments: dict) -> str:
    """A call's arguments as lines a person reads: `  amount: 30.00`."""
    return "\n".join(f"  {name.replace('_', ' ')}: {value}" for name, value in arguments.items())


def _supervisors_notify(
    *, merchant: Merchant, event: str, payload: dict, subject: str, body: str
) -> None:
    """A signed webhook when the shop configured one, and an email to each supervisor."""
    _webhook_queue(merchant=merchant, event=event, payload=payload)
    _emails_queue(
        merchant=merchant,
        event=event,
        recipients=[m.user.email for m in supervisor_memberships(merchant=merchant)],
        subject=subject,
        body=body,
    )


def _webhook_queue(*, merchant: Merchant, event: str, payload: dict) -> None:
    if merchant.webhook_url:
        delivery_queue(
            merchant=merchant,
            transport=Transport.WEBHOOK,
            event=event,
            recipient=merchant.webhook_url,
            payload={"event": event, **payload},
        )


def _emails_queue(
    *, merchant: Merchant, event: str, recipients: list[str], subject: str, body: str
) -> None:
    """One email to each address (a bad address fails alone, and is retried alone)."""
    for address in sorted({address for address in recipients if address}):
        delivery_queue(
            merchant=merchant,
            transport=Transport.EMAIL,
            event=event,
            recipient=address,
            subject=subject,
            payload={"body": body},
        )

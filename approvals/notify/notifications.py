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
from approvals.models import Approval, ApprovalStatus, Decision, DecisionLink, Transport
from approvals.notify.outbox import delivery_queue
from approvals.selectors import approver_group_members
from approvals.stand_ins import StandIn, stand_ins_for


def _call_of(approval: Approval) -> dict:
    """What every webhook about a call names: the call, its run, the tool and its arguments."""
    return {
        "interrupt_id": approval.interrupt_id,
        "run_id": str(approval.run_id),
        "tool_name": approval.tool_name,
        "tool_args": approval.proposed_args,
    }


def approval_requested_notify(*, approval: Approval) -> None:
    """Queue the notifications of a new pending call: the signed webhook, and to each
    supervisor an email with links deciding it as them. Call inside the transaction that writes
    the Approval."""
    _webhook_queue(
        merchant=approval.merchant,
        event="approval.requested",
        payload={**_call_of(approval), "expires_at": approval.expires_at.isoformat()},
    )
    _decision_emails_queue(
        approval=approval,
        event="approval.requested",
        memberships=supervisor_memberships(merchant=approval.merchant),
        subject=f"Approval needed: {approval.tool_name} ({approval.interrupt_id})",
        body=(
            f"The agent wants to run {approval.tool_name} with:\n"
            f"{_arguments_text(approval.arguments_on_the_table)}\n\n"
            f"Decide before {approval.expires_at:%Y-%m-%d %H:%M} UTC."
        ),
    )


def approval_escalated_notify(*, approval: Approval) -> None:
    """Queue the notifications of a call escalated by its policy: a signed webhook
    `approval.escalated`, and an email to the shop's operators and the policy's address. Call
    inside the transaction that marks it escalated."""
    rules = approval.policy_version
    operators = []
    if rules is None or rules.escalate_to_operators:
        operators = [
            membership
            for membership in supervisor_memberships(merchant=approval.merchant)
            if membership.role == Role.OPERATOR
        ]
    waited = int((approval.escalated_at - approval.created_at).total_seconds() // 60)
    _webhook_queue(
        merchant=approval.merchant,
        event="approval.escalated",
        payload={
            **_call_of(approval),
            "waiting_since": approval.created_at.isoformat(),
            "escalated_at": approval.escalated_at.isoformat(),
            "expires_at": approval.expires_at.isoformat(),
        },
    )
    subject = f"Escalated: {approval.tool_name} waits for a decision ({approval.interrupt_id})"
    body = (
        f"Nobody has decided this call for {waited} minutes. The agent wants to run "
        f"{approval.tool_name} with:\n{_arguments_text(approval.arguments_on_the_table)}\n\n"
        f"It expires at {approval.expires_at:%Y-%m-%d %H:%M} UTC."
    )
    _decision_emails_queue(
        approval=approval,
        event="approval.escalated",
        memberships=operators,
        subject=subject,
        body=body,
    )
    # The policy's address may be nobody's account: it gets the call's page, not links.
    operator_addresses = {membership.user.email for membership in operators}
    if rules and rules.escalate_to_email and rules.escalate_to_email not in operator_addresses:
        _emails_queue(
            merchant=approval.merchant,
            event="approval.escalated",
            recipients=[rules.escalate_to_email],
            subject=subject,
            body=f"{body}\n{_approval_link(approval)}",
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


def _decision_emails_queue(
    *, approval: Approval, event: str, memberships, subject: str, body: str
) -> None:
    """To each person, an email about a pending call with two links of their own: approve
    the arguments it shows, or reject. Each decides once, as that person, after they confirm
    on the page it opens (a mail scanner following it decides nothing)."""
    # Someone away gets nothing meanwhile: their stand-in does, told why (unless they get
    # their own anyway).
    recipients: dict[int, StandIn] = {}
    people = [membership.user for membership in memberships]
    for stand_in in stand_ins_for(merchant=approval.merchant, users=people):
        if not stand_in.delegated or stand_in.user.pk not in recipients:
            recipients[stand_in.user.pk] = stand_in
    recipients = {pk: stand_in for pk, stand_in in recipients.items() if stand_in.user.email}
    # Every link of the email in one statement: this runs in the transaction that pauses the
    # call, which on SQLite holds the database's one write lock.
    approvers = _approvers_among(approval, recipients)
    made = DecisionLink.objects.bulk_create(
        DecisionLink(
            approval=approval,
            user=stand_in.user,
            decision=decision,
            args_digest=approval.digest_on_the_table,
            expires_at=approval.expires_at,
        )
        for stand_in in recipients.values()
        for decision in (Decision.APPROVE, Decision.REJECT)
        if decision == Decision.REJECT or stand_in.user.pk in approvers
    )
    tokens = {(link.user_id, link.decision): link.token for link in made}
    approve = customer_words.decision_named(approval, Decision.APPROVE)
    for stand_in in recipients.values():
        user = stand_in.user
        links = {
            decision: _portal_link("portal-decision-link", token=tokens[user.pk, decision])
            for decision in (Decision.APPROVE, Decision.REJECT)
            if (user.pk, decision) in tokens
        }
        approve_line = (
            f"{approve}: {links[Decision.APPROVE]}\n"
            if Decision.APPROVE in links
            else f"{_not_yours_to_approve(approval, user)} You may reject it.\n"
        )
        delivery_queue(
            merchant=approval.merchant,
            transport=Transport.EMAIL,
            event=event,
            recipient=user.email,
            subject=subject,
            payload={
                "body": (
                    f"{stand_in.said()}{body}\n\n"
                    f"{approve_line}"
                    f"Reject: {links[Decision.REJECT]}\n\n"
                    "These links are yours: each asks you to confirm, then decides as you, once. "
                    "They stop working when the call is decided, changed or expires.\n"
                    f"The call in the portal: {_approval_link(approval)}"
                )
            },
        )


def _approvers_among(approval: Approval, recipients: dict[int, StandIn]) -> set[int]:
    """The recipients whose approval of the call would count: not the run's requester, and
    of the approver group its arguments need, if they need one (the gate checks again)."""
    people = set(recipients) - {approval.run.account_id}
    if not approval.required_group:
        return people
    return approver_group_members(
        merchant_id=approval.merchant_id, group=approval.required_group, user_ids=people
    )


def _not_yours_to_approve(approval: Approval, user) -> str:
    if user.pk == approval.run.account_id:
        return "You started this run, so its calls need someone else's approval."
    return f"This call needs approvals from the {approval.required_group} group."


def _approval_link(approval: Approval) -> str:
    return _portal_link("portal-approval", interrupt_id=approval.interrupt_id)


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

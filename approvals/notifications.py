"""Telling supervisors that a call waits for them: email, and a signed webhook delivered from
an outbox with retries and backoff (django-q2 has no delayed tasks). Telling customers what a
person of the shop decided about their request: an email from an outbox of its own.

A failing webhook never blocks or fails a run: the run's transaction only writes the outbox
row; delivery happens after the commit, in a task, and again from `maintain` until it works or
gives up.
"""

import http.client
import json
import logging
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from agentportal.models import Merchant, Role
from agentportal.selectors import supervisor_memberships
from agentportal.webhooks import UnsafeWebhookUrl, signature, webhook_url_check
from approvals import customer_words
from approvals.models import (
    Approval,
    ApprovalStatus,
    CustomerEmail,
    DeliveryStatus,
    WebhookDelivery,
)

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
TIMEOUT_SECONDS = 5.0
SIGNATURE_HEADER = "X-AgentPortal-Signature"


def backoff(attempts: int) -> timedelta:
    """10 s, 20 s, 40 s ... at most an hour between attempts."""
    return timedelta(seconds=min(3600, 10 * 2 ** max(0, attempts - 1)))


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
    transaction.on_commit(
        partial(
            _email,
            sorted(set(recipients)),
            f"Escalated: {approval.tool_name} waits for a decision ({approval.interrupt_id})",
            (
                f"Nobody has decided this call for {waited} minutes. The agent wants to run "
                f"{approval.tool_name} with:\n{_arguments_text(approval.proposed_args)}\n\n"
                f"It expires at {approval.expires_at:%Y-%m-%d %H:%M} UTC:\n"
                f"{_portal_link('portal-approval', interrupt_id=approval.interrupt_id)}"
            ),
        ),
        robust=True,
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
    CustomerEmail.objects.get_or_create(
        key=f"{news_of}:{approval.interrupt_id}",
        defaults={
            "merchant": approval.merchant,
            "recipient": customer,
            "subject": subject[:200],
            "body": (
                f"Hello {customer.get_username()},\n\n{news}\n\n"
                f"Your conversation with the assistant: {_portal_link('portal-chat')}\n\n"
                f"{approval.merchant.name}"
            ),
            "next_attempt_at": timezone.now(),
        },
    )
    transaction.on_commit(_customer_emails_enqueue, robust=True)


def _customer_emails_enqueue() -> None:
    from django_q.tasks import async_task

    async_task("approvals.tasks.send_customer_emails")


def customer_emails_wake() -> int:
    """`maintain`'s part: hand due customer emails to a task. Returns how many are due."""
    due = CustomerEmail.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now()
    ).count()
    if due:
        _customer_emails_enqueue()
    return due


def customer_emails_send_due(*, limit: int = 100) -> int:
    """Send every due customer email once, oldest first (news that corrects earlier news
    comes after it); safe to run concurrently and twice."""
    due = (
        CustomerEmail.objects.filter(
            status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now()
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return sum(customer_email_send(email_id=pk) for pk in list(due[:limit]))


def customer_email_send(*, email_id: int) -> bool:
    """One attempt, claimed by a conditional UPDATE first, so two senders never send the same
    email; it is sent outside any transaction. A failed attempt is tried again after a backoff."""
    email = CustomerEmail.objects.select_related("recipient").get(pk=email_id)
    now = timezone.now()
    attempts = email.attempts + 1
    with transaction.atomic():
        claimed = CustomerEmail.objects.filter(
            pk=email.pk,
            status=DeliveryStatus.PENDING,
            attempts=email.attempts,
            next_attempt_at__lte=now,
        ).update(attempts=attempts, next_attempt_at=now + backoff(attempts))
    if not claimed:
        return False
    try:
        send_mail(
            subject=email.subject,
            message=email.body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[email.recipient.email],
        )
    except Exception as error:
        logger.warning("customer email %s attempt %s failed: %s", email.pk, attempts, error)
        changes = {"last_error": f"{type(error).__name__}: {error}"}
        if attempts >= MAX_ATTEMPTS:
            changes["status"] = DeliveryStatus.FAILED
    else:
        changes = {"status": DeliveryStatus.DELIVERED, "sent_at": timezone.now()}
    with transaction.atomic():
        CustomerEmail.objects.filter(pk=email.pk, attempts=attempts).update(**changes)
    return changes.get("status") == DeliveryStatus.DELIVERED


def _portal_link(name: str, **kwargs) -> str:
    """An absolute link to a portal page, which a mail client can follow."""
    return settings.AGENTPORTAL["SITE_URL"] + reverse(name, kwargs=kwargs)


def _arguments_text(arguments: dict) -> str:
    """A call's arguments as lines a person reads: `  amount: 30.00`."""
    return "\n".join(f"  {name.replace('_', ' ')}: {value}" for name, value in arguments.items())


def _supervisors_notify(
    *, merchant: Merchant, event: str, payload: dict, subject: str, body: str
) -> None:
    """A signed webhook in the outbox (it commits with the caller's transaction; delivery
    starts after the commit) and an email to the shop's supervisors after the commit."""
    _webhook_queue(merchant=merchant, event=event, payload=payload)
    transaction.on_commit(partial(_email_supervisors, merchant, subject, body), robust=True)


def _webhook_queue(*, merchant: Merchant, event: str, payload: dict) -> None:
    """A signed webhook in the outbox when the shop configured one; delivery starts after
    the commit."""
    if merchant.webhook_url:
        WebhookDelivery.objects.create(
            merchant=merchant,
            event=event,
            payload={"event": event, **payload},
            url=merchant.webhook_url,
            next_attempt_at=timezone.now(),
        )
        transaction.on_commit(_deliveries_enqueue, robust=True)


def _deliveries_enqueue() -> None:
    from django_q.tasks import async_task

    async_task("approvals.tasks.deliver_webhooks")


def _email_supervisors(merchant: Merchant, subject: str, body: str) -> None:
    _email(
        [m.user.email for m in supervisor_memberships(merchant=merchant) if m.user.email],
        subject,
        body,
    )


def _email(recipients: list[str], subject: str, body: str) -> None:
    if not recipients:
        return
    try:
        send_mail(
            subject=subject,
            message=body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=recipients,
        )
    except Exception:
        logger.exception("could not email %s: %s", ", ".join(recipients), subject)


def webhooks_wake() -> int:
    """`maintain`'s part: hand due deliveries to a task (a slow receiver must not hold up
    the sweep). Returns how many are due."""
    due = WebhookDelivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now()
    ).count()
    if due:
        _deliveries_enqueue()
    return due


def webhooks_deliver_due(*, limit: int = 100) -> int:
    """Deliver every due webhook once; safe to run concurrently and twice."""
    due = WebhookDelivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now()
    ).values_list("pk", flat=True)
    return sum(webhook_deliver(delivery_id=pk) for pk in list(due[:limit]))


def webhook_deliver(*, delivery_id: int) -> bool:
    """One attempt. The attempt is claimed by a conditional UPDATE first, so two deliverers
    never send the same attempt; the POST happens outside any transaction."""
    delivery = WebhookDelivery.objects.select_related("merchant").get(pk=delivery_id)
    now = timezone.now()
    attempts = delivery.attempts + 1
    with transaction.atomic():
        claimed = WebhookDelivery.objects.filter(
            pk=delivery.pk,
            status=DeliveryStatus.PENDING,
            attempts=delivery.attempts,
            next_attempt_at__lte=now,
        ).update(attempts=attempts, next_attempt_at=now + backoff(attempts))
    if not claimed:
        return False
    error = _post(delivery.merchant, delivery)
    with transaction.atomic():
        if error is None:
            changes = {"status": DeliveryStatus.DELIVERED, "delivered_at": timezone.now()}
        elif attempts >= MAX_ATTEMPTS:
            changes = {"status": DeliveryStatus.FAILED, "last_error": error}
        else:
            changes = {"last_error": error}
        WebhookDelivery.objects.filter(pk=delivery.pk, attempts=attempts).update(**changes)
    if error is not None:
        logger.warning("webhook %s attempt %s failed: %s", delivery.pk, attempts, error)
    return error is None


def _post(merchant: Merchant, delivery: WebhookDelivery) -> str | None:
    """POST the signed payload to the address the URL was checked at (a redirect is never
    followed: it could point inside our network); the error, or None on a 2xx answer."""
    try:
        checked = webhook_url_check(delivery.url)
    except UnsafeWebhookUrl as refused:
        return f"refused: {refused}"
    body = json.dumps(delivery.payload, sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "AgentPortal-Webhooks/1",
        "X-AgentPortal-Event": delivery.event,
        "X-AgentPortal-Delivery": str(delivery.pk),
        SIGNATURE_HEADER: signature(merchant.webhook_secret, body),
    }
    connection = checked.connection(timeout=TIMEOUT_SECONDS)
    try:
        connection.request("POST", checked.target, body=body, headers=headers)
        status = connection.getresponse().status
    except (http.client.HTTPException, OSError) as error:
        return f"{type(error).__name__}: {error}"
    finally:
        connection.close()
    return None if 200 <= status < 300 else f"HTTP {status}"

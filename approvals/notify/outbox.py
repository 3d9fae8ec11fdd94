"""Sending what the outbox holds (approvals.models.Delivery): one sweep for every message,
whatever carries it (a signed webhook, an email), each attempt claimed before it is sent,
retried with backoff (django-q2 has no delayed tasks), given up after MAX_ATTEMPTS.

A message never blocks or fails what it tells of: the news' transaction only writes the row;
sending happens after the commit, in a task, and again from `maintain` until it works or
gives up.
"""

import http.client
import json
import logging
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from agentportal.models import Merchant
from agentportal.webhooks import UnsafeWebhookUrl, signature, webhook_url_check
from approvals.models import Delivery, DeliveryStatus, Transport

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
TIMEOUT_SECONDS = 5.0
SIGNATURE_HEADER = "X-AgentPortal-Signature"


def backoff(attempts: int) -> timedelta:
    """10 s, 20 s, 40 s ... at most an hour between attempts."""
    return timedelta(seconds=min(3600, 10 * 2 ** max(0, attempts - 1)))


def delivery_queue(
    *,
    merchant: Merchant,
    transport: str,
    event: str,
    recipient: str,
    payload: dict,
    subject: str = "",
    key: str | None = None,
) -> Delivery:
    """Write one message to the outbox. Call inside the transaction of the news it tells:
    it commits with it, and sending starts after the commit. With `key`, news written before
    is not written again (the earlier row is returned)."""
    fields = {
        "merchant": merchant,
        "transport": transport,
        "event": event,
        "recipient": recipient,
        "subject": subject[:200],
        "payload": payload,
        "next_attempt_at": timezone.now(),
    }
    if key is None:
        delivery = Delivery.objects.create(**fields)
    else:
        delivery, _ = Delivery.objects.get_or_create(key=key, defaults=fields)
    transaction.on_commit(_deliveries_enqueue, robust=True)
    return delivery


def _deliveries_enqueue() -> None:
    from django_q.tasks import async_task

    async_task("approvals.tasks.deliver")


def deliveries_wake() -> int:
    """`maintain`'s part: hand due messages to a task (a slow receiver must not hold up the
    sweep). Returns how many are due."""
    due = Delivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now()
    ).count()
    if due:
        _deliveries_enqueue()
    return due


def deliveries_deliver_due(*, limit: int = 100) -> int:
    """Attempt every due message once, oldest first (news that corrects earlier news comes
    after it); safe to run concurrently and twice. Returns how many were delivered."""
    due = (
        Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now())
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return sum(delivery_attempt(delivery_id=pk) for pk in list(due[:limit]))


def delivery_attempt(*, delivery_id: int) -> bool:
    """One attempt, claimed by a conditional UPDATE first, so two senders never send the same
    attempt; it is sent outside any transaction. A failed attempt is tried again after a
    backoff, until MAX_ATTEMPTS."""
    delivery = Delivery.objects.select_related("merchant").get(pk=delivery_id)
    now = timezone.now()
    attempts = delivery.attempts + 1
    with transaction.atomic():
        claimed = Delivery.objects.filter(
            pk=delivery.pk,
            status=DeliveryStatus.PENDING,
            attempts=delivery.attempts,
            next_attempt_at__lte=now,
        ).update(attempts=attempts, next_attempt_at=now + backoff(attempts))
    if not claimed:
        return False
    error = TRANSPORTS[delivery.transport](delivery)
    if error is None:
        changes = {"status": DeliveryStatus.DELIVERED, "delivered_at": timezone.now()}
    else:
        logger.warning(
            "%s %s (%s) attempt %s failed: %s",
            delivery.transport,
            delivery.pk,
            delivery.event,
            attempts,
            error,
        )
        changes = {"last_error": error}
        if attempts >= MAX_ATTEMPTS:
            changes["status"] = DeliveryStatus.FAILED
    with transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk, attempts=attempts).update(**changes)
    return error is None


def _webhook_post(delivery: Delivery) -> str | None:
    """POST the signed payload to the address the URL was checked at (a redirect is never
    followed: it could point inside our network); the error, or None on a 2xx answer."""
    try:
        checked = webhook_url_check(delivery.recipient)
    except UnsafeWebhookUrl as refused:
        return f"refused: {refused}"
    body = json.dumps(delivery.payload, sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "AgentPortal-Webhooks/1",
        "X-AgentPortal-Event": delivery.event,
        "X-AgentPortal-Delivery": str(delivery.pk),
        SIGNATURE_HEADER: signature(delivery.merchant.webhook_secret, body),
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


def _email_send(delivery: Delivery) -> str | None:
    try:
        send_mail(
            subject=delivery.subject,
            message=delivery.payload["body"],
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[delivery.recipient],
        )
    except Exception as error:  # whatever the mail backend raises is this attempt's failure
        return f"{type(error).__name__}: {error}"
    return None


TRANSPORTS: dict[str, Callable[[Delivery], str | None]] = {
    Transport.WEBHOOK: _webhook_post,
    Transport.EMAIL: _email_send,
}

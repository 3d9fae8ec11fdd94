"""Webhooks from the outbox: signed, retried with backoff, never to private addresses."""

import hashlib
import hmac
import json
import socket
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.webhooks import UnsafeWebhookUrl, webhook_url_check
from approvals.models import Approval, Delivery, DeliveryStatus, Transport
from approvals.notify import outbox
from runs.models import RunStatus
from tests.approvals.refund_helpers import refund_run_waiting
from tests.approvals.webhook_helpers import SECRET

SMALL_REFUND = "refund ORD-1004 amount 9"


def _webhook(**filters) -> Delivery:
    return Delivery.objects.get(transport=Transport.WEBHOOK, **filters)


def _drained() -> int:
    """Drain the outbox once (the supervisors' emails go too); the webhooks it delivered."""
    delivered = Delivery.objects.filter(
        transport=Transport.WEBHOOK, status=DeliveryStatus.DELIVERED
    )
    before = delivered.count()
    outbox.deliveries_deliver_due()
    return delivered.count() - before


def test_pending_call_is_announced_by_a_signed_webhook(demo, receiver):
    hook = receiver()

    # when: a call pauses, and the outbox is drained
    run = refund_run_waiting(SMALL_REFUND).run
    delivery = _webhook()
    assert delivery.status == DeliveryStatus.PENDING
    assert _drained() == 1

    # then: one signed POST naming the call
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED
    [(headers, body)] = hook.requests
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-AgentPortal-Signature"] == expected
    assert headers["X-AgentPortal-Event"] == "approval.requested"
    payload = json.loads(body)
    assert payload["interrupt_id"] == Approval.objects.get(run=run).interrupt_id
    assert payload["tool_args"]["amount"] == "9.00"
    # and draining again sends nothing more
    assert _drained() == 0
    assert len(hook.requests) == 1


def test_failing_webhook_is_retried_with_backoff_and_never_blocks_the_run(demo, receiver):
    hook = receiver(500, 503)
    run = refund_run_waiting(SMALL_REFUND).run

    # when: the first two attempts fail
    assert _drained() == 0
    delivery = _webhook()
    assert delivery.attempts == 1
    assert delivery.next_attempt_at > timezone.now()
    assert "HTTP 500" in delivery.last_error
    assert _drained() == 0  # not due yet: nothing sent
    assert len(hook.requests) == 1
    with time_machine.travel(delivery.next_attempt_at + timedelta(seconds=1)):
        assert _drained() == 0
    delivery.refresh_from_db()
    with time_machine.travel(delivery.next_attempt_at + timedelta(seconds=1)):
        assert _drained() == 1

    # then: delivered on the third attempt; the run waited for its decision all along
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, len(hook.requests)) == (
        DeliveryStatus.DELIVERED,
        3,
        3,
    )
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL


def test_webhook_gives_up_after_its_last_attempt(demo, receiver):
    receiver(*([500] * outbox.MAX_ATTEMPTS))
    refund_run_waiting(SMALL_REFUND)
    delivery = _webhook()
    for _ in range(outbox.MAX_ATTEMPTS):
        delivery.refresh_from_db()
        with time_machine.travel(delivery.next_attempt_at + timedelta(seconds=1)):
            _drained()
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.attempts == outbox.MAX_ATTEMPTS


def test_redirects_are_not_followed(demo, receiver):
    hook = receiver(302)
    refund_run_waiting(SMALL_REFUND)
    assert _drained() == 0
    assert len(hook.requests) == 1
    assert "HTTP 302" in _webhook().last_error


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/hook",
        "https://127.0.0.1/hook",
        "https://localhost/hook",
        "https://10.1.2.3/hook",
        "https://192.168.0.7/hook",
        "https://169.254.169.254/latest",
        "https://[::1]/hook",
        "ftp://files.example/hook",
    ],
)
def test_unsafe_webhook_urls_are_refused(url, settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "WEBHOOK_ALLOW_PRIVATE": False}
    with pytest.raises(UnsafeWebhookUrl):
        webhook_url_check(url)


def test_private_addresses_pass_only_when_the_setting_allows(allow_private):
    webhook_url_check("http://127.0.0.1:9/hook")


def test_a_refused_url_is_recorded_not_sent(demo, settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "WEBHOOK_ALLOW_PRIVATE": False}
    demo.webhook_url, demo.webhook_secret = "https://127.0.0.1:9/hook", SECRET
    demo.save()
    refund_run_waiting(SMALL_REFUND)
    assert _drained() == 0
    assert "refused" in _webhook().last_error


def test_the_connection_goes_to_the_address_that_was_checked(demo, receiver, monkeypatch):
    # given: a name that resolves to the receiver once, and to nothing after (a rebinding
    # resolver would answer an inside address the second time)
    hook = receiver()
    port = hook.server.server_address[1]
    demo.webhook_url = f"http://hooks.shop.test:{port}/hooks"
    demo.save()
    refund_run_waiting(SMALL_REFUND)
    answers = [[(2, 1, 6, "", ("127.0.0.1", port))]]
    real_resolve = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host != "hooks.shop.test":
            return real_resolve(host, *args, **kwargs)  # an address, not a name
        if answers:
            return answers.pop()
        raise OSError(f"no second lookup of {host} may happen")

    monkeypatch.setattr("socket.getaddrinfo", resolve)

    # when
    delivered = _drained()

    # then: delivered to the checked address, under the URL's own host name
    assert delivered == 1, _webhook().last_error
    [(headers, _)] = hook.requests
    assert headers["Host"] == f"hooks.shop.test:{port}"


def test_every_checked_address_is_tried_and_no_other(demo, receiver, monkeypatch):
    # given: a name with two addresses, the first of which does not answer
    hook = receiver()
    port = hook.server.server_address[1]
    demo.webhook_url = f"http://hooks.shop.test:{port}/hooks"
    demo.save()
    refund_run_waiting(SMALL_REFUND)
    real_resolve = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "hooks.shop.test":
            return [
                (2, 1, 6, "", ("127.0.0.2", port + 1)),
                (2, 1, 6, "", ("127.0.0.1", port)),
            ]
        return real_resolve(host, *args, **kwargs)

    monkeypatch.setattr("socket.getaddrinfo", resolve)

    assert _drained() == 1, _webhook().last_error
    assert len(hook.requests) == 1


def test_a_plan_waiting_for_review_is_announced_to_the_supervisors(
    demo, api, receiver, django_capture_on_commit_callbacks, mailoutbox
):
    from tests.approvals.plan_helpers import command, exchange_run, reconcile, ticket_of

    # given: a shop with a webhook and a supervisor with an email address
    hook = receiver()
    User.objects.filter(username="sam").update(email="sam@shop.test")
    run = exchange_run(demo)
    ticket = ticket_of(run)

    # when: the customer confirms and the run reconciles
    command(api("alice"), ticket, "confirm")
    with django_capture_on_commit_callbacks(execute=True):
        reconcile(run)

    # then: a signed webhook and an email point the supervisors to the plan
    delivery = _webhook(event="plan.review_requested")
    assert delivery.payload["ticket_id"] == str(ticket.pk)
    assert delivery.payload["changes_requested"] is None
    assert _drained() == 1
    [(headers, body)] = hook.requests
    assert headers["X-AgentPortal-Event"] == "plan.review_requested"
    assert json.loads(body)["summary"] == "exchange 1 x Trail running shoes, size 42, for size 43"
    assert sorted(email.to for email in mailoutbox) == [["sam@shop.test"], ["sue@example.com"]]
    assert all(f"/portal/tickets/{ticket.pk}/" in email.body for email in mailoutbox)

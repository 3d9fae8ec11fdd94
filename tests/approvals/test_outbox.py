"""The one outbox: every notification is written with the news it tells (nothing is lost to a
crash between the commit and the sending), each attempt is claimed once however many senders
race for it, and a failing one is retried with backoff until it gives up."""

from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.db import transaction

from approvals.models import Delivery, DeliveryStatus, Transport
from approvals.notify import outbox
from tests.approvals.refund_helpers import refund_run_waiting
from tests.threads import in_threads


def test_the_supervisors_emails_are_written_with_the_call_before_anything_is_sent(demo):
    # when a refund pauses for a supervisor, and nothing has sent anything yet
    approval = refund_run_waiting().approval

    # then the outbox holds one email for each supervisor with an address, due now
    emails = Delivery.objects.filter(transport=Transport.EMAIL, event="approval.requested")
    assert sorted(emails.values_list("recipient", flat=True)) == [
        "sam@example.com",
        "sue@example.com",
    ]
    assert all(approval.interrupt_id in email.payload["body"] for email in emails)
    assert mail.outbox == []
    # and the once-a-minute sweep hands them to a task, as it would after a crash
    assert outbox.deliveries_wake() == 2


def test_news_rolled_back_leaves_nothing_to_send(demo):
    # given a message written inside a transaction that then fails
    with pytest.raises(RuntimeError), transaction.atomic():
        outbox.delivery_queue(
            merchant=demo,
            transport=Transport.EMAIL,
            event="approval.requested",
            recipient="sam@example.com",
            payload={"body": "a call waits"},
        )
        raise RuntimeError("the news' transaction fails")

    # then the outbox is empty
    assert not Delivery.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_many_senders_racing_for_one_message_send_it_once(demo):
    # given one due email, and eight senders draining the outbox at once
    delivery = outbox.delivery_queue(
        merchant=demo,
        transport=Transport.EMAIL,
        event="customer.decision",
        key="decision:int-race",
        recipient="alice@example.com",
        subject="Your refund",
        payload={"body": "approved"},
    )

    # when
    delivered = in_threads([outbox.deliveries_deliver_due] * 8)

    # then exactly one sent it, in one attempt
    assert sorted(delivered) == [0] * 7 + [1]
    assert [email.to for email in mail.outbox] == [["alice@example.com"]]
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 1)


def test_the_same_news_with_a_key_is_written_once(demo):
    def told():
        return outbox.delivery_queue(
            merchant=demo,
            transport=Transport.EMAIL,
            event="customer.decision",
            key="decision:int-7",
            recipient="alice@example.com",
            payload={"body": "approved"},
        )

    assert told().pk == told().pk
    assert Delivery.objects.count() == 1


def test_a_failing_email_is_retried_with_backoff_then_given_up(demo, monkeypatch):
    # given a mail server that refuses everything
    def refuse(**kwargs):
        raise OSError("mail server down")

    monkeypatch.setattr("approvals.notify.outbox.send_mail", refuse)
    delivery = outbox.delivery_queue(
        merchant=demo,
        transport=Transport.EMAIL,
        event="approval.requested",
        recipient="sam@example.com",
        payload={"body": "a call waits"},
    )

    # when the sweep runs at once, then whenever the message is due again
    outbox.deliveries_deliver_due()
    delivery.refresh_from_db()
    waits = [delivery.next_attempt_at - delivery.created_at]
    assert outbox.deliveries_deliver_due() == 0  # not due yet: no attempt
    for _ in range(outbox.MAX_ATTEMPTS - 1):
        with time_machine.travel(delivery.next_attempt_at + timedelta(seconds=1)):
            before = delivery.next_attempt_at
            outbox.deliveries_deliver_due()
        delivery.refresh_from_db()
        waits.append(delivery.next_attempt_at - before)

    # then each wait doubled (up to an hour), and the last attempt gave up with the error
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, outbox.MAX_ATTEMPTS)
    assert delivery.last_error == "OSError: mail server down"
    assert [round(wait.total_seconds() / 10) * 10 for wait in waits[1:4]] == [20, 40, 80]
    assert mail.outbox == []

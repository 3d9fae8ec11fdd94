"""The customer is emailed when a person of the shop decides their request (or nobody does in
time): once, from an outbox, however often the sending task runs."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User

from approvals import services, tasks
from approvals.models import Approval, CustomerEmail, DeliveryStatus
from tests.approvals.refund_helpers import refund_run_waiting

REFUND_30 = "I want a refund for ORD-1003 amount 30"


def _decide(approval: Approval, decision: str, **details) -> None:
    services.approval_decide_as_user(
        approval=approval, user=User.objects.get(username="sam"), decision=decision, **details
    )


@pytest.mark.parametrize(
    ("decision", "details", "subject", "news"),
    [
        (
            "approve",
            {},
            "Demo Shop approved your refund of 30.00 EUR for ORD-1003",
            "Demo Shop approved your refund of 30.00 EUR for ORD-1003.",
        ),
        (
            "revise",
            {"reason": "one shirt was worn"},
            "Demo Shop approved your refund of 30.00 EUR for ORD-1003, changed",
            "Demo Shop approved a refund of 14.75 EUR instead of 30.00 EUR for ORD-1003: one shirt "
            "was worn",
        ),
        (
            "reject",
            {"reason": "bought in a sale"},
            "Demo Shop declined your refund of 30.00 EUR for ORD-1003",
            "Demo Shop declined your refund of 30.00 EUR for ORD-1003: bought in a sale",
        ),
    ],
)
def test_a_decision_is_emailed_to_the_customer_once_even_if_the_task_runs_twice(
    demo, mailoutbox, django_capture_on_commit_callbacks, decision, details, subject, news
):
    # given alice's refund waits for a person of the shop
    approval = refund_run_waiting(REFUND_30).approval
    if decision == "revise":
        details["tool_args"] = {**approval.proposed_args, "amount": "14.75"}

    # when sam decides, and the sending task is delivered twice
    with django_capture_on_commit_callbacks(execute=True):
        _decide(approval, decision, **details)
    sent = [tasks.send_customer_emails(), tasks.send_customer_emails()]

    # then alice got one email that says what was decided, with a link back to her chat
    assert sent == [1, 0]
    [email] = mailoutbox
    assert email.to == ["alice@example.com"]
    assert email.subject == subject
    assert news in email.body
    assert "http://127.0.0.1:8000/portal/chat/" in email.body
    assert CustomerEmail.objects.get().status == DeliveryStatus.DELIVERED


def test_a_refund_nobody_decided_in_time_is_emailed_once(demo, mailoutbox):
    # given alice's refund waits for a person of the shop, and nobody decides
    approval = refund_run_waiting(REFUND_30).approval

    # when it expires, the sweep runs twice, and so does the sending task
    with time_machine.travel(approval.expires_at + timedelta(seconds=1)):
        services.approvals_expire_due()
        services.approvals_expire_due()
        tasks.send_customer_emails()
        tasks.send_customer_emails()

    # then
    [email] = mailoutbox
    assert email.subject == "No decision in time on your refund of 30.00 EUR for ORD-1003"
    assert "Nobody at Demo Shop could decide" in email.body


def test_a_failed_send_is_tried_again_later_and_not_sooner(demo, mailoutbox, monkeypatch):
    # given a decision whose first sending fails
    _decide(refund_run_waiting(REFUND_30).approval, "approve")
    monkeypatch.setattr(
        "approvals.notifications.send_mail",
        lambda **kwargs: (_ for _ in ()).throw(OSError("mail server down")),
    )
    assert tasks.send_customer_emails() == 0
    monkeypatch.undo()

    # when the task runs again at once, and after the backoff
    at_once = tasks.send_customer_emails()
    with time_machine.travel(CustomerEmail.objects.get().next_attempt_at + timedelta(seconds=1)):
        later = tasks.send_customer_emails()

    # then it is sent once, on the later run
    assert (at_once, later) == (0, 1)
    assert len(mailoutbox) == 1
    assert CustomerEmail.objects.get().attempts == 2


def test_a_customer_without_an_email_address_gets_no_email(demo, mailoutbox):
    User.objects.filter(username="alice").update(email="")

    _decide(refund_run_waiting(REFUND_30).approval, "reject", reason="no")
    tasks.send_customer_emails()

    assert not CustomerEmail.objects.exists()
    assert mailoutbox == []

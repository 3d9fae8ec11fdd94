"""The customer is emailed when a person of the shop decides their request (or nobody does in
time): once, from an outbox, however often the sending task runs."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User

from approvals import tasks
from approvals.gate import services
from approvals.models import Approval, Delivery, DeliveryStatus
from tests.approvals.refund_helpers import refund_run_waiting

REFUND_30 = "I want a refund for ORD-1003 amount 30"


def _to_customer() -> Delivery:
    return Delivery.objects.get(event__startswith="customer.")


def _to_alice(mailoutbox) -> list:
    """The emails alice got (the supervisors get theirs from the same outbox)."""
    return [email for email in mailoutbox if email.to == ["alice@example.com"]]


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
    sent = [tasks.deliver(), tasks.deliver()]

    # then alice got one email that says what was decided, with a link back to her chat
    assert sent[1] == 0
    [email] = _to_alice(mailoutbox)
    assert email.subject == subject
    assert news in email.body
    assert "http://127.0.0.1:8000/portal/chat/" in email.body
    assert _to_customer().status == DeliveryStatus.DELIVERED


def test_a_refund_nobody_decided_in_time_is_emailed_once(demo, mailoutbox):
    # given alice's refund waits for a person of the shop, and nobody decides
    approval = refund_run_waiting(REFUND_30).approval

    # when it expires, the sweep runs twice, and so does the sending task
    with time_machine.travel(approval.expires_at + timedelta(seconds=1)):
        services.approvals_expire_due()
        services.approvals_expire_due()
        tasks.deliver()
        tasks.deliver()

    # then
    [email] = _to_alice(mailoutbox)
    assert email.subject == "No decision in time on your refund of 30.00 EUR for ORD-1003"
    assert "Nobody at Demo Shop could decide" in email.body


def test_a_failed_send_is_tried_again_later_and_not_sooner(demo, mailoutbox, monkeypatch):
    # given a decision whose first sending fails
    _decide(refund_run_waiting(REFUND_30).approval, "approve")
    monkeypatch.setattr(
        "approvals.notify.outbox.send_mail",
        lambda **kwargs: (_ for _ in ()).throw(OSError("mail server down")),
    )
    assert tasks.deliver() == 0
    monkeypatch.undo()
    assert "OSError: mail server down" in _to_customer().last_error

    # when the task runs again at once, and after the backoff
    at_once = tasks.deliver()
    with time_machine.travel(_to_customer().next_attempt_at + timedelta(seconds=1)):
        tasks.deliver()

    # then it is sent once, on the later run
    assert at_once == 0
    assert len(_to_alice(mailoutbox)) == 1
    assert (_to_customer().attempts, _to_customer().status) == (2, DeliveryStatus.DELIVERED)


def test_a_customer_without_an_email_address_gets_no_email(demo, mailoutbox):
    User.objects.filter(username="alice").update(email="")

    _decide(refund_run_waiting(REFUND_30).approval, "reject", reason="no")
    tasks.deliver()

    assert not Delivery.objects.filter(event__startswith="customer.").exists()
    assert _to_alice(mailoutbox) == []

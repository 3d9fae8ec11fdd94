"""The decision emails as a mail client receives them, from a real SMTP server: each
supervisor's message carries their own links, and following one decides as them."""

import email
import re
from email import policy

import pytest
from aiosmtpd.controller import Controller
from django.test import Client

from approvals.bench.measure import free_port
from approvals.models import ApprovalStatus, Refund
from approvals.notify import outbox
from runs import worker
from tests.approvals.refund_helpers import refund_run_waiting


class Inbox:
    """An aiosmtpd handler keeping every message it is sent, parsed."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):  # the hook aiosmtpd calls
        self.messages.append(email.message_from_bytes(envelope.content, policy=policy.default))
        return "250 OK"


@pytest.fixture
def smtp(settings):
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = controller.hostname, controller.port
    yield inbox
    controller.stop()


def body_of(message) -> str:
    return message.get_body(preferencelist=("plain",)).get_content()


@pytest.mark.django_db
def test_each_supervisor_receives_links_that_decide_as_them(demo, smtp):
    # given a refund waiting for a decision, its emails sent
    approval = refund_run_waiting().approval

    # when the outbox delivers
    outbox.deliveries_deliver_due()

    # then sam and sue each received one message with two links of their own
    by_recipient = {message["To"]: body_of(message) for message in smtp.messages}
    assert sorted(by_recipient) == ["sam@example.com", "sue@example.com"]
    sam = dict(
        re.findall(
            r"^(Approve 20\.00 EUR|Reject): \S+?(/portal/decide/\S+/)\r?$",
            by_recipient["sam@example.com"],
            re.MULTILINE,
        )
    )
    assert set(sam) == {"Approve 20.00 EUR", "Reject"}
    assert sam["Approve 20.00 EUR"] not in by_recipient["sue@example.com"]

    # when sam follows his approve link from the message and confirms on its page
    page = Client()
    shown = page.get(sam["Approve 20.00 EUR"])
    token = re.search(r'name="token" value="([^"]+)"', shown.content.decode()).group(1)
    done = page.post("/portal/decide/", {"token": token})
    worker.tick()

    # then the refund was approved as sam and paid once
    assert shown.status_code == done.status_code == 200
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name) == (ApprovalStatus.EXECUTED, "sam")
    assert [str(refund.amount) for refund in Refund.objects.all()] == ["20.00"]

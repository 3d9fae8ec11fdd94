"""The customer's chat page in a real browser: messages, answers as they come, a refund the
shop decides, /stop and /new typed or by their buttons."""

import pytest
from django.contrib.auth.models import User

from approvals.gate import services
from approvals.models import Approval, ApprovalStatus
from runs import worker
from runs.models import AgentRun, Conversation, RunStatus
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def _send(page, text: str) -> None:
    page.fill("#chat-text", text)
    page.click("#chat-form button[type=submit]")


def _refund_waiting(signed_in, live_server):
    """alice's chat on a phone, her refund of 20.00 for ORD-1003 waiting for a supervisor."""
    alice = signed_in("alice")
    alice.set_viewport_size({"width": 390, "height": 844})
    alice.goto(f"{live_server.url}/portal/chat/")
    _send(alice, "I want a refund for ORD-1003 amount 20")
    worker.tick()
    alice.wait_for_selector("text=is waiting for a person at Demo Shop", timeout=10000)
    return alice


def test_customer_chats_sees_the_answer_live_and_starts_over(demo, signed_in, live_server):
    alice = signed_in("alice")
    alice.goto(f"{live_server.url}/portal/chat/")

    # when: a question, answered by a worker while the page is open
    _send(alice, "What is the status of order ORD-1001?")
    assert "writing an answer" in alice.inner_text("#chat-messages")
    worker.tick()

    # then: the answer appears without a reload
    alice.wait_for_selector(".answer", timeout=10000)
    assert "ORD-1001" in alice.inner_text(".answer")
    screenshot(alice, "chat-answer")

    # when: a second question, stopped before any worker takes it
    _send(alice, "And ORD-1002?")
    _send(alice, "/stop")
    assert "Stopped." in alice.inner_text(".messages")
    stopped = AgentRun.objects.order_by("-created_at").first()
    assert stopped.status == RunStatus.CANCELLED

    # when: starting over
    first = Conversation.objects.get(customer__username="alice")
    _send(alice, "/new")

    # then: a fresh, empty conversation
    assert "Started a new conversation." in alice.inner_text(".messages")
    assert "No messages yet." in alice.inner_text("#chat-messages")
    first.refresh_from_db()
    assert first.status == "CLOSED"


def test_unknown_command_is_a_form_error(demo, signed_in, live_server):
    alice = signed_in("alice")
    alice.goto(f"{live_server.url}/portal/chat/")
    _send(alice, "/reboot")
    assert "not a command" in alice.inner_text("#chat-form")
    assert not AgentRun.objects.exists()


def test_opening_the_chat_writes_nothing(demo, signed_in, live_server):
    alice = signed_in("alice")
    alice.goto(f"{live_server.url}/portal/chat/")
    assert "No messages yet." in alice.inner_text("#chat-messages")
    alice.wait_for_timeout(1500)  # a few htmx polls
    assert not Conversation.objects.exists()


def test_stopping_a_refund_that_waits_tells_the_customer_nothing_was_done(
    demo, signed_in, live_server
):
    # given alice's refund waits for a supervisor, her chat open on a phone
    alice = _refund_waiting(signed_in, live_server)

    # when she stops it
    _send(alice, "/stop")

    # then the page says plainly that nothing was refunded
    notice = alice.wait_for_selector(".notice", timeout=10000)
    assert "Nothing was done" in notice.inner_text()
    assert "stopped" in notice.inner_text()
    screenshot(alice, "chat-stopped-refund-phone")


def test_new_warns_before_cancelling_a_refund_that_waits_for_a_supervisor(
    demo, signed_in, live_server
):
    # given alice's refund waits for a supervisor, her chat open on a phone
    alice = _refund_waiting(signed_in, live_server)
    approval = Approval.objects.get()

    # when she sends /new
    _send(alice, "/new")

    # then she is told what it would cancel, and nothing is cancelled yet
    warning = alice.inner_text("#confirm-new")
    screenshot(alice, "chat-new-warning-phone")
    assert "Your refund of 20.00 EUR for ORD-1003 is waiting for a person at Demo Shop." in warning
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL

    # when she keeps waiting, then nothing changed
    alice.click("#confirm-new a")
    assert alice.locator("#confirm-new").count() == 0
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL

    # when she sends /new again and confirms, then the refund is cancelled and she starts over
    _send(alice, "/new")
    alice.click("#confirm-new button")
    assert "Started a new conversation." in alice.inner_text(".messages")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.CANCELLED
    assert AgentRun.objects.get(pk=approval.run_id).status == RunStatus.CANCELLED


def test_the_chat_is_left_alone_while_nothing_changes(demo, signed_in, live_server):
    # given alice's chat with an answer in it, and a word of it selected to copy
    alice = signed_in("alice")
    alice.goto(f"{live_server.url}/portal/chat/")
    _send(alice, "What is the status of order ORD-1001?")
    worker.tick()
    alice.wait_for_selector(".answer", timeout=10000)
    alice.wait_for_timeout(1000)  # the last fetch after the answer has come back
    requests = []
    alice.on("request", lambda request: requests.append(request))
    alice.evaluate(
        """() => {
            document.activeElement.blur();
            const range = document.createRange();
            range.selectNodeContents(document.querySelector('.answer'));
            window.getSelection().removeAllRanges();
            window.getSelection().addRange(range);
        }"""
    )
    selected = alice.evaluate("() => window.getSelection().toString()")
    assert "ORD-1001" in selected

    # when five seconds pass with nothing new
    alice.wait_for_timeout(5000)

    # then the page asked for nothing (its stream stays open, silent), the list was not
    # redrawn: the selection is still there, and new messages will be announced politely to
    # screen readers
    assert [request.url for request in requests] == []
    assert alice.evaluate("() => window.getSelection().toString()") == selected
    assert alice.get_attribute("#chat-messages", "aria-live") == "polite"


def test_a_refund_the_shop_revised_says_what_was_refunded_instead(demo, signed_in, live_server):
    # given alice's refund of 20.00 waits for the shop, her chat open on a phone
    alice = _refund_waiting(signed_in, live_server)
    waiting = alice.inner_text(".waiting")
    assert "You can leave this page: we will email you at alice@example.com" in waiting
    screenshot(alice, "chat-refund-waiting-phone")

    # when sam approves 15.00 instead, with his reason, and the assistant carries it out
    approval = Approval.objects.get()
    services.approval_decide_as_user(
        approval=approval,
        user=User.objects.get(username="sam"),
        decision="revise",
        tool_args={**approval.proposed_args, "amount": "15.00"},
        reason="one shirt was worn before it came back",
    )
    worker.tick()

    # then her chat says, without a reload, what was refunded instead and why
    notice = alice.wait_for_selector(".notice", timeout=10000).inner_text()
    assert notice == (
        "We refunded 15.00 EUR instead of 20.00 EUR for ORD-1003: one shirt was worn before it "
        "came back."
    )
    assert "15.00 EUR" in alice.inner_text(".answer")
    screenshot(alice, "chat-refund-revised-phone")
    alice.set_viewport_size({"width": 1280, "height": 900})
    screenshot(alice, "chat-refund-revised-desktop")
    assert alice.evaluate("() => document.documentElement.scrollWidth") <= 1280


def test_the_stop_and_new_conversation_buttons(demo, signed_in, live_server):
    # given alice's refund waits for the shop, her chat open on a phone
    alice = _refund_waiting(signed_in, live_server)
    screenshot(alice, "chat-buttons-phone")
    assert alice.evaluate("() => document.documentElement.scrollWidth") <= 390

    # when she presses Stop
    alice.click("#stop-form button")

    # then the refund is stopped, and the page says nothing was done
    assert "Stopped." in alice.inner_text(".messages")
    assert "Nothing was done" in alice.wait_for_selector(".notice", timeout=10000).inner_text()
    assert Approval.objects.get().status == ApprovalStatus.CANCELLED

    # when a new refund waits and she presses New conversation
    _send(alice, "I want a refund for ORD-1004 amount 10")
    worker.tick()
    alice.wait_for_selector("text=Your refund of 10.00 EUR for ORD-1004", timeout=10000)
    alice.click("#new-form button")

    # then she is warned first, and starts over only once she confirms
    assert "ORD-1004" in alice.inner_text("#confirm-new")
    screenshot(alice, "chat-new-button-warning-phone")
    alice.click("#confirm-new button")
    assert "Started a new conversation." in alice.inner_text(".messages")
    assert "No messages yet." in alice.inner_text("#chat-messages")


@pytest.mark.parametrize("width", [1280, 390])
def test_a_message_too_long_stays_in_the_box_with_the_error_under_it(
    demo, signed_in, live_server, width
):
    # given alice's chat, and a message of hers one character too long
    alice = signed_in("alice")
    alice.set_viewport_size({"width": width, "height": 844})
    alice.goto(f"{live_server.url}/portal/chat/")
    typed = "About my order ORD-1001: " + "the sound cuts out. " * 200
    typed = typed[:4001]

    # when she sends it
    _send(alice, typed)

    # then nothing is sent; her text is still in the box, the error right under it
    error = alice.wait_for_selector("#chat-text-error")
    screenshot(alice, f"chat-message-too-long-{width}")
    assert "Your message is 1 character too long to send (4000 at most)." in error.inner_text()
    assert alice.input_value("#chat-text") == typed.strip()
    assert alice.get_attribute("#chat-text", "aria-invalid") == "true"
    assert not AgentRun.objects.exists()

    # when she shortens it and sends it again, then it is sent and the box is empty
    _send(alice, alice.input_value("#chat-text")[:200])
    alice.wait_for_selector(".chat-row")
    assert alice.input_value("#chat-text") == ""
    assert alice.locator("#chat-text-error").count() == 0
    assert AgentRun.objects.count() == 1

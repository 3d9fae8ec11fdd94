"""The customer's chat in plain words: no status names, amounts with their currency, what a
person of the shop decided, the assistant's questions kept, Stop and New conversation."""

import threading
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from approvals.gate import services
from approvals.models import Approval
from runs import worker
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.conftest import wait_for
from tests.pages import signed_in

INTERNAL_WORDS = (
    "WAITING_APPROVAL",
    "WAITING_USER",
    "PENDING_APPROVAL",
    "(started)",
    "(queued)",
    "demo-shop",
    "version 1",
    "HEAD-WX1",
    "TEE-BASIC",
    "size one size",
    "message(s)",
)


def _user(username: str) -> User:
    return User.objects.get(username=username)


def _chat(client: Client) -> str:
    return client.get("/portal/chat/").text


def _internals_in(page: str) -> list[str]:
    return [word for word in INTERNAL_WORDS if word in page]


def _refund_waiting(client: Client, text: str = "I want a refund for ORD-1003 amount 30"):
    client.post("/portal/chat/", {"text": text})
    worker.tick()
    return Approval.objects.get()


def test_a_customer_lands_on_the_chat_after_signing_in_and_a_supervisor_on_the_inbox(demo):
    # given the sign-in form, as each of them fills it in
    def sign_in(username: str):
        return Client().post(
            "/accounts/login/?next=/portal/",
            {"username": username, "password": "demo"},
            follow=True,
        )

    # when alice and sam sign in
    alice, sam = sign_in("alice"), sign_in("sam")

    # then alice is in her chat, sam in his inbox
    assert alice.redirect_chain[-1][0] == "/portal/chat/"
    assert "Ask the shop's assistant" in alice.text
    assert sam.redirect_chain[-1][0] == "/portal/"
    assert "portal-inbox-rows" in sam.text or "/portal/inbox/rows/" in sam.text


def test_an_answer_reads_plainly_with_its_currency(demo):
    # given alice asked about an order of headphones (one size)
    alice = signed_in("alice")
    alice.post("/portal/chat/", {"text": "What is the status of order ORD-1001?"})

    # when the question waits for a worker, and when it has been answered
    waiting = _chat(alice)
    worker.tick()
    answered = _chat(alice)

    # then neither page shows internals, and the amounts say their currency
    assert _internals_in(waiting) == []
    assert "writing an answer" in waiting
    assert _internals_in(answered) == []
    assert "total 129.00 EUR" in answered
    assert "Wireless headphones x 1" in answered


def test_a_refund_that_waits_says_who_decides_until_when_and_that_we_will_email(demo):
    # given alice's refund waits for a person of the shop
    alice = signed_in("alice")
    approval = _refund_waiting(alice)

    # when she looks at her chat
    page = _chat(alice)

    # then she reads who decides, by when, and that she may leave
    assert _internals_in(page) == []
    assert "Your refund of 30.00 EUR for ORD-1003 is waiting for a person at Demo Shop" in page
    assert f"by {approval.expires_at:%H:%M} UTC" in page
    assert "You can leave this page: we will email you at alice@example.com" in page


def test_a_revised_refund_says_what_we_refunded_instead_and_why(demo):
    # given alice's refund of 30.00, which sam approves at 25.00 with a reason
    alice = signed_in("alice")
    approval = _refund_waiting(alice)
    services.approval_decide_as_user(
        approval=approval,
        user=User.objects.get(username="sam"),
        decision="revise",
        tool_args={**approval.proposed_args, "amount": "25.00"},
        reason="the case was not damaged",
    )

    # when the assistant carries it out
    worker.tick()
    page = _chat(alice)

    # then the chat says what was refunded instead of what she asked, and why
    assert AgentRun.objects.get().status == RunStatus.COMPLETED
    assert (
        "We refunded 25.00 EUR instead of 30.00 EUR for ORD-1003: the case was not damaged" in page
    )
    assert "a refund of 25.00 EUR for order ORD-1003 has been issued" in page
    assert _internals_in(page) == []


def test_a_declined_refund_says_so_and_why(demo):
    # given alice's refund, which sam rejects
    alice = signed_in("alice")
    approval = _refund_waiting(alice)
    services.approval_decide_as_user(
        approval=approval,
        user=User.objects.get(username="sam"),
        decision="reject",
        reason="already refunded by bank transfer",
    )

    # when the assistant answers
    worker.tick()
    page = _chat(alice)

    # then
    assert (
        "Demo Shop declined your refund of 30.00 EUR for ORD-1003: already refunded by bank "
        "transfer" in page
    )
    assert _internals_in(page) == []


def test_the_assistants_question_stays_after_it_was_answered(demo):
    # given the assistant asked alice which order she means
    alice = signed_in("alice")
    alice.post("/portal/chat/", {"text": "I want my money back"})
    worker.tick()
    assert "Which order is this about?" in _chat(alice)

    # when she answers
    alice.post("/portal/chat/", {"text": "ORD-1001"})
    worker.tick()
    page = _chat(alice)

    # then the question is still there, above her answer
    assert page.index("Which order is this about?") < page.index("<strong>You</strong>: ORD-1001")
    assert "The assistant asked you a question." not in page


def test_status_stop_and_new_speak_plainly(demo):
    # given alice's refund waits for a person of the shop, and one more message waits behind
    alice = signed_in("alice")
    _refund_waiting(alice)
    alice.post("/portal/chat/", {"text": "And ORD-1002?"})

    # when she asks for the status, then stops
    status = alice.post("/portal/chat/", {"text": "/status"}, follow=True).text
    stopped = alice.post("/portal/chat/", {"text": "/stop"}, follow=True).text

    # then
    assert "Your request is waiting for a person of the shop." in status
    assert "1 more message waits its turn." in status
    assert "sent, answered after the one before" in status
    assert "Stopped." in stopped
    assert "Nothing was done: the refund did not go ahead because the request was stopped." in (
        stopped
    )
    assert _internals_in(status) == [] and _internals_in(stopped) == []


def test_the_chat_page_has_stop_and_new_conversation_buttons(demo):
    page = _chat(signed_in("alice"))

    assert '<input type="hidden" name="text" value="/stop">' in page
    assert '<input type="hidden" name="text" value="/new">' in page
    assert ">Stop</button>" in page
    assert ">New conversation</button>" in page


def test_the_earlier_requests_say_where_each_stands(demo):
    # given one answered request and one refund waiting for the shop
    alice = signed_in("alice")
    alice.post("/portal/chat/", {"text": "What is the status of order ORD-1001?"})
    worker.tick()
    _refund_waiting(alice)

    # when she opens her earlier requests
    page = alice.get("/portal/requests/").text

    # then
    assert "answered" in page
    assert "waiting for a person of the shop" in page
    assert "I want a refund for ORD-1003 amount 30" in page
    assert _internals_in(page) == []
    assert "COMPLETED" not in page


def test_a_refund_nobody_decided_in_time_says_so(demo):
    # given alice's refund that nobody decides before it expires
    alice = signed_in("alice")
    approval = _refund_waiting(alice)

    # when the sweep expires it and the assistant answers
    with time_machine.travel(approval.expires_at + timedelta(seconds=1)):
        services.approvals_expire_due()
        worker.tick()
    page = _chat(alice)

    # then
    assert "Nobody at Demo Shop could decide on your refund of 30.00 EUR" in page
    assert _internals_in(page) == []


@pytest.mark.django_db(transaction=True)
def test_a_slow_step_says_what_the_assistant_is_doing(demo, settings):
    # given the warehouse takes two seconds to answer
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "STOCK_LATENCY_SECONDS": 2.0}
    alice = signed_in("alice")
    alice.post("/portal/chat/", {"text": "Is there stock of the shoes of ORD-1002 in size 43?"})

    # when a worker takes the request while alice's chat is open
    working = threading.Thread(target=worker.tick)
    working.start()

    # then while the stock was checked, the chat said so
    wait_for(
        lambda: "Checking warehouse stock…" in _chat(alice),
        timeout=10,
        message="the chat never said that the stock was being checked",
    )
    working.join()
    answered = _chat(alice)
    assert "Checking warehouse stock…" not in answered
    assert "in stock" in answered


def test_two_refunds_that_wait_together_are_both_named(demo):
    # given alice asks for two refunds in one message, and both wait for the shop
    alice = signed_in("alice")
    asked = "I want a refund for ORD-1001 amount 20 and ORD-1003 amount 30"
    alice.post("/portal/chat/", {"text": asked})
    worker.tick()
    assert Approval.objects.filter(status="PENDING_APPROVAL").count() == 2

    # when she looks at her chat
    page = _chat(alice)

    # then both are named, in the order she asked for them
    assert (
        "Your refunds of 20.00 EUR for ORD-1001 and 30.00 EUR for ORD-1003 are waiting for a "
        "person at Demo Shop to decide" in page
    )
    assert _internals_in(page) == []


def test_status_while_the_assistant_asks_her_says_it_waits_for_her_answer(demo):
    # given the assistant asked alice which order she means
    alice = signed_in("alice")
    alice.post("/portal/chat/", {"text": "I want my money back"})
    worker.tick()

    # when she asks for the status
    status = alice.post("/portal/chat/", {"text": "/status"}, follow=True).text

    # then
    assert "Your request is waiting for your answer." in status
    assert "waiting for you." not in status


@pytest.mark.parametrize(
    ("status", "told"),
    [
        (RunStatus.QUEUED, "Your request is sent, waiting its turn."),
        (RunStatus.RUNNING, "Your request is being answered."),
        (RunStatus.WAITING_USER, "Your request is waiting for your answer."),
        (RunStatus.WAITING_APPROVAL, "Your request is waiting for a person of the shop."),
        (RunStatus.PARKED, "Your request is being looked into by a person of the shop."),
    ],
)
def test_status_says_where_an_open_request_stands_in_a_sentence(demo, status, told):
    # given alice's request, standing at `status`
    alice = signed_in("alice")
    alice.post("/portal/chat/", {"text": "What is the status of order ORD-1001?"})
    AgentRun.objects.update(status=status)

    # when she asks for the status
    page = alice.post("/portal/chat/", {"text": "/status"}, follow=True).text

    # then
    assert told in page


def test_every_request_says_where_it_stands_in_the_customers_words(demo):
    # given one request of alice's at each status (each put there once all are asked)
    alice = signed_in("alice")
    runs = {}
    for status in RunStatus.values:
        runs[status] = factories.run_queue(
            customer=_user("alice"), merchant=demo, message=f"Question {len(runs) + 1}"
        )
        AgentRun.objects.filter(pk=runs[status].pk).update(status=RunStatus.COMPLETED)
    for status, run in runs.items():
        AgentRun.objects.filter(pk=run.pk).update(status=status)

    # when she opens her earlier requests
    page = alice.get("/portal/requests/").text

    # then each says where it stands, and each reads after "Your request is"
    for standing in (
        "sent, waiting its turn",
        "being answered",
        "waiting for your answer",
        "waiting for a person of the shop",
        "being looked into by a person of the shop",
        "answered",
        "not completed: something went wrong on our side",
        "stopped",
    ):
        assert f'<td data-label="Where it stands">{standing}</td>' in page
    assert _internals_in(page) == []


def test_an_unknown_command_lists_only_the_commands_a_customer_may_use(demo):
    # given alice in her chat
    alice = signed_in("alice")

    # when she types a command that does not exist
    page = alice.post("/portal/chat/", {"text": "/reboot"}).text

    # then she is told hers, and not the shop's
    assert "/reboot is not a command. Try one of /stop, /new, /reset, /switch, /status." in page
    assert "/takeover" not in page and "/release" not in page
    assert not AgentRun.objects.exists()


def test_a_message_over_the_limit_stays_in_the_box_with_the_error_beside_it(demo):
    # given alice typed a message one character too long
    alice = signed_in("alice")
    typed = "My order ORD-1001 " + "x" * (4001 - len("My order ORD-1001 "))

    # when she sends it
    response = alice.post("/portal/chat/", {"text": typed})

    # then nothing is sent, the text is still in the box, and the box says what is wrong
    assert response.status_code == 200
    assert not AgentRun.objects.exists()
    page = response.text
    assert f'value="{typed}"' in page
    assert (
        "Your message is 1 character too long to send (4000 at most). Please shorten it and send "
        "it again." in page
    )
    assert 'aria-invalid="true"' in page
    assert 'aria-describedby="chat-text-error"' in page
    assert 'id="chat-text-error"' in page


def test_the_warning_before_starting_over_leaves_the_box_empty(demo):
    # given alice's refund waits for a person of the shop
    alice = signed_in("alice")
    _refund_waiting(alice)

    # when she presses New conversation
    page = alice.post("/portal/chat/", {"text": "/new"}).text

    # then she is asked to confirm, and her box holds nothing she did not type
    assert 'id="confirm-new"' in page
    assert 'value="/new"' in page.split('id="chat-form"')[0]
    assert 'value="/new"' not in page.split('id="chat-form"')[1]

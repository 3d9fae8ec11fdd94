"""Live pages: what a page's stream hears (its page changed, who else is viewing it), and who
may follow a page."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals import selectors
from approvals.gate import escalation, services
from approvals.models import Approval, ApprovalStatus, ApprovalVote
from approvals.portal import live, presence
from runs import conversations, worker
from tests.approvals.plan_helpers import exchange_run, ticket_of
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.approvals.refund_helpers import refund_run_waiting
from tests.http import next_event
from tests.pages import page_stream


def _state(topic: live.Topic) -> live.PageState:
    return live.page_states([topic])[topic]


def _user(username: str) -> User:
    return User.objects.get(username=username)


def test_a_calls_page_changes_when_the_call_is_decided(demo):
    # given
    approval = refund_run_waiting().approval
    topic = live.Topic("approval", str(approval.pk))
    before = _state(topic)
    assert before.digest == live.approval_digest(approval)

    # when
    services.approval_decide_as_user(
        approval=approval, user=_user("sam"), decision="reject", reason="not this one"
    )

    # then
    assert _state(topic).digest != before.digest


def test_the_viewers_of_a_call_are_its_shops_staff_who_say_they_are_there(demo):
    approval = refund_run_waiting().approval
    topic = live.Topic("approval", str(approval.pk))

    # when sam, sue and a supervisor of another shop say they view the call
    for username in ("sam", "sue", "oscar"):
        presence.presence_mark(topic=topic, user_id=_user(username).pk, username=username)

    # then only the shop's own are named; one who left is not
    assert _state(topic).viewers == ("sam", "sue")
    presence.presence_clear(topic=topic, user_id=_user("sue").pk)
    assert _state(topic).viewers == ("sam",)


def test_the_inbox_changes_when_a_call_arrives_and_the_chat_when_the_customer_writes(demo):
    inbox = live.Topic("inbox", str(_user("sam").pk))
    chat = live.Topic("chat", str(_user("alice").pk))
    before = live.page_states([inbox, chat])

    # when alice writes in her chat, and the agent asks for a refund
    conversation = conversations.conversation_create(merchant=demo, customer=_user("alice"))
    conversations.message_send(conversation=conversation, text="refund ORD-1003 amount 20")
    worker.tick()

    # then
    assert Approval.objects.count() == 1
    after = live.page_states([inbox, chat])
    assert after[inbox].digest != before[inbox].digest
    assert after[chat].digest != before[chat].digest


def _four_eyes_refund(demo) -> Approval:
    """A 500.00 refund that needs two supervisors and is escalated after ten minutes."""
    policy_set(demo, two_approvers_from="200.00", escalate_after_seconds=600)
    big_order(demo)
    return approval_of(refund_run(demo, "500", order="ORD-9001"))


def _drawn(approval: Approval) -> str:
    """The digest the call's page is drawn with, as the page view reads the call."""
    shown = selectors.approvals_for_supervisor(user=_user("sue")).get(pk=approval.pk)
    return live.approval_digest(shown)


def test_the_other_supervisors_pages_change_when_a_first_approval_is_given(demo):
    # given sue has the call and her inbox open, drawn before sam approves
    approval = _four_eyes_refund(demo)
    topics = [live.Topic("approval", str(approval.pk)), live.Topic("inbox", str(_user("sue").pk))]
    before = live.page_states(topics)
    assert before[topics[0]].digest == _drawn(approval)

    # when sam gives the first of the two approvals
    services.approval_decide_as_user(approval=approval, user=_user("sam"), decision="approve")

    # then the call still waits, and both her pages are told they changed; the hub's digest
    # is the one a page drawn now is drawn with
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    after = live.page_states(topics)
    assert after[topics[0]].digest != before[topics[0]].digest
    assert after[topics[1]].digest != before[topics[1]].digest
    assert after[topics[0]].digest == _drawn(approval)


def test_the_pages_change_when_the_call_is_escalated(demo):
    approval = _four_eyes_refund(demo)
    topics = [live.Topic("approval", str(approval.pk)), live.Topic("inbox", str(_user("sue").pk))]
    before = live.page_states(topics)

    # when its time to be decided has passed and it is escalated
    Approval.objects.filter(pk=approval.pk).update(
        escalate_at=timezone.now() - timedelta(seconds=1)
    )
    assert escalation.approval_escalate(interrupt_id=approval.interrupt_id)

    after = live.page_states(topics)
    assert after[topics[0]].digest != before[topics[0]].digest
    assert after[topics[1]].digest != before[topics[1]].digest
    assert after[topics[0]].digest == _drawn(approval)


def test_a_vote_or_an_escalation_changes_the_digests_even_where_updated_at_stays(demo):
    # given a call whose updated_at nothing below touches (an update() does not bump it)
    approval = _four_eyes_refund(demo)
    topics = [live.Topic("approval", str(approval.pk)), live.Topic("inbox", str(_user("sue").pk))]
    states = [live.page_states(topics)]

    # when a vote is written, then the call is marked escalated
    ApprovalVote.objects.create(
        approval=approval,
        voter=f"user:{_user('sam').pk}",
        user=_user("sam"),
        decision="approve",
        args_digest="a" * 64,
    )
    states.append(live.page_states(topics))
    Approval.objects.filter(pk=approval.pk).update(escalated_at=timezone.now())
    states.append(live.page_states(topics))

    # then each step changed both pages' digests
    for topic in topics:
        digests = [state[topic].digest for state in states]
        assert len(set(digests)) == 3, (topic, digests)


@pytest.mark.parametrize(
    ("viewers", "expected"),
    [
        (["sam"], ""),
        (["sam", "sue"], '<span class="viewing">sue is viewing</span>'),
        (["bob", "sam", "sue"], '<span class="viewing">bob and sue are viewing</span>'),
        (["a", "b", "sam", "<c>"], '<span class="viewing">a, b and &lt;c&gt; are viewing</span>'),
    ],
)
def test_the_viewers_line_names_the_others(viewers, expected):
    assert presence.viewers_html(viewers, me="sam") == expected


def test_the_stream_names_a_colleague_who_arrives_then_says_the_call_changed(demo, live_server):
    # given sam follows the call's page as he was shown it
    approval = refund_run_waiting().approval
    topic = live.Topic("approval", str(approval.pk))
    seen = live.approval_digest(approval)
    stream = page_stream(
        live_server.url, "sam", f"/portal/approvals/{approval.interrupt_id}/live/?seen={seen}"
    )
    assert stream.status == 200
    assert stream.getheader("Content-Type") == "text/event-stream"
    assert next_event(stream) == "retry: 2000\n"

    # when sue opens it too, then decides it
    presence.presence_mark(topic=topic, user_id=_user("sue").pk, username="sue")
    arrived = next_event(stream)
    services.approval_decide_as_user(
        approval=approval, user=_user("sue"), decision="approve", reason=""
    )
    decided = next_event(stream)
    stream.close()

    # then sam heard each, in that order
    assert arrived == 'event: viewers\ndata: <span class="viewing">sue is viewing</span>\n'
    assert decided.startswith("event: changed\n")


def test_only_the_people_who_may_see_a_page_may_follow_it(demo, live_server):
    approval = refund_run_waiting().approval
    call = f"/portal/approvals/{approval.interrupt_id}/live/"
    no_plan = "/portal/tickets/00000000-0000-0000-0000-000000000000/live/"
    for username, path, status in [
        (None, call, 403),
        ("oscar", call, 404),
        ("sam", no_plan, 404),
        ("sam", "/portal/chat/live/", 404),
        ("alice", "/portal/inbox/live/", 404),
    ]:
        stream = page_stream(live_server.url, username, path)
        assert (username, path, stream.status) == (username, path, status)
        stream.close()


def test_many_chats_read_at_once_have_the_digests_each_chat_page_draws(demo):
    # given alice with an earlier and a current conversation, bob with none yet, and sam, who
    # is no customer
    alice, bob, sam = _user("alice"), _user("bob"), _user("sam")
    earlier = conversations.conversation_create(merchant=demo, customer=alice)
    conversations.message_send(conversation=earlier, text="What is the status of ORD-1001?")
    worker.tick()
    open_now = conversations.conversation_create(merchant=demo, customer=alice)
    conversations.message_send(conversation=open_now, text="refund ORD-1003 amount 20")
    earlier.refresh_from_db()

    # when
    digests = selectors.chat_digests(user_ids=[alice.pk, bob.pk, sam.pk])

    # then each is what that customer's own page is drawn with
    for user in (alice, bob):
        principal = selectors.chat_principal(user=user)
        conversation = selectors.chat_conversation(principal=principal)
        assert digests[user.pk] == selectors.chat_digest(conversation=conversation)
    assert digests[alice.pk] != digests[bob.pk]
    assert digests[sam.pk] == selectors.chat_digest(conversation=None)


def test_a_customer_sees_the_staff_on_her_plan_only_as_a_person_of_the_shop(demo, live_server):
    # given sue, sam and alice are on alice's exchange plan (marked at once: one first read)
    ticket = ticket_of(exchange_run(demo))
    topic = live.Topic("ticket", str(ticket.pk))
    for username in ("sue", "sam", "alice"):
        presence.presence_mark(topic=topic, user_id=_user(username).pk, username=username)

    # when alice and sam follow it
    path = f"/portal/tickets/{ticket.pk}/live/?seen={live.ticket_digest(ticket)}"
    alice, sam = (
        page_stream(live_server.url, "alice", path),
        page_stream(live_server.url, "sam", path),
    )
    assert next_event(alice) == next_event(sam) == "retry: 2000\n"
    told_alice, told_sam = next_event(alice), next_event(sam)
    alice.close()
    sam.close()

    # then alice reads the shop's name, never a login; sam still reads who is there
    assert told_alice == (
        'event: viewers\ndata: <span class="viewing">People of Demo Shop are looking at your plan'
        "</span>\n"
    )
    assert "sue" not in told_alice and "sam" not in told_alice
    assert told_sam == (
        'event: viewers\ndata: <span class="viewing">alice and sue are viewing</span>\n'
    )


@pytest.mark.parametrize(
    ("viewers", "expected"),
    [
        (["alice"], ""),
        (["alice", "sam"], "A person of Demo &amp; Co is looking at your plan"),
        (["sam", "sue", "alice"], "People of Demo &amp; Co are looking at your plan"),
    ],
)
def test_the_viewers_line_a_customer_reads_names_only_the_shop(viewers, expected):
    line = presence.viewers_html(viewers, me="alice", customer_of="Demo & Co")

    assert line == (f'<span class="viewing">{expected}</span>' if expected else "")

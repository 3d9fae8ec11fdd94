"""The gate's events in a run's timeline: a call waiting for people, each approval given, who
decided (named only to readers who may know), escalations, and the call page showing them."""

from django.contrib.auth.models import User

from approvals.gate import services
from approvals.models import Approval
from runs import worker
from runs.models import RunEvent
from runs.timeline import event_sentence
from tests import factories
from tests.pages import signed_in


def _event(type_: str, **data) -> RunEvent:
    return RunEvent(type=type_, data=data)


def test_a_call_waiting_for_people_reads_as_a_sentence():
    assert (
        event_sentence(
            _event(
                "approval.requested",
                tool_name="issue_refund",
                tool_args={"order_id": "ORD-1003", "amount": "20.00"},
                expires_at="2026-12-03T22:11:29.984872+00:00",
            )
        )
        == "Waiting for a person to decide issue_refund (amount 20.00, order id ORD-1003) "
        "until 2026-12-03 22:11:29 UTC"
    )


def test_who_decided_is_named_only_to_readers_who_may_know():
    decided = _event(
        "approval.decided",
        interrupt_id="int-1",
        decision="revise",
        decided_by="a supervisor",
        reason="only the shoes",
        tool_args={"amount": "12.50"},
    )
    expected_tail = ": “only the shoes”; to run with amount 12.50"
    assert event_sentence(decided) == "Revised by a supervisor" + expected_tail
    assert event_sentence(decided, decided_by={"int-1": "sam"}) == "Revised by sam" + expected_tail


def test_a_first_of_two_approvals_and_an_escalation_read_as_sentences():
    assert (
        event_sentence(
            _event(
                "approval.approval_given",
                interrupt_id="int-1",
                decision="approve",
                by="a supervisor",
                approvals_given=1,
                required_approvals=2,
                tool_args=None,
            )
        )
        == "Approved by a supervisor: 1 of 2 approvals, waiting for another"
    )
    assert event_sentence(
        _event(
            "approval.approval_given",
            interrupt_id="int-1",
            decision="revise",
            by="a supervisor",
            approvals_given=1,
            required_approvals=2,
            tool_args={"amount": "350.00"},
        )
    ) == (
        "Revised by a supervisor: 1 of 2 approvals, waiting for another; to run with amount 350.00"
    )
    assert (
        event_sentence(
            _event(
                "approval.escalated",
                interrupt_id="int-1",
                waiting_since="2026-12-03T22:01:29.984872+00:00",
                expires_at="2026-12-03T22:31:29.984872+00:00",
            )
        )
        == "Escalated: undecided since 2026-12-03 22:01:29 UTC, expires 2026-12-03 22:31:29 UTC"
    )


def test_the_call_page_shows_the_timeline_in_words_with_the_decider(demo):
    # given a refund sam revised, and the run carried on
    alice, sam = User.objects.get(username="alice"), User.objects.get(username="sam")
    factories.run_queue(customer=alice, merchant=demo, message="refund ORD-1003 amount 20")
    worker.tick()
    approval = Approval.objects.get()
    services.approval_decide_as_user(
        approval=approval,
        user=sam,
        decision="revise",
        tool_args={"order_id": "ORD-1003", "amount": "12.50", "reason": "partial"},
        reason="only the shoes",
    )
    worker.tick()

    # when sam opens the call
    page = signed_in(sam).get(f"/portal/approvals/{approval.interrupt_id}/").content.decode()

    # then
    assert "Revised by sam: “only the shoes”; to run with amount 12.50, order id ORD-1003" in page
    assert "issue_refund succeeded: amount 12.50" in page and "status executed" in page
    decided = approval.run.events.get(type="approval.decided")
    assert decided.created_at.strftime("%Y-%m-%d %H:%M:%S") in page


def test_an_approval_by_the_shops_policy_says_no_person_decided():
    assert event_sentence(
        _event(
            "approval.decided",
            decision="approve",
            decided_by="policy:3@2",
            by_policy=True,
            tool_args={"amount": "5.00"},
        )
    ) == ("Approved by the shop's policy (policy:3@2), with no person")

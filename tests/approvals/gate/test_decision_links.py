"""Deciding from an email: each supervisor's links are their own, following one decides
nothing, confirming decides once as that person on the arguments the email showed, and a
link refuses once the call was decided, changed or expired, or the person's role went."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agentportal.models import Membership
from approvals.models import (
    Approval,
    ApprovalStatus,
    ApprovalVote,
    ApproverGroup,
    DecisionLink,
    Delivery,
    Refund,
)
from runs import worker
from runs.models import AgentRun, RunEvent, RunStatus
from tests.approvals.gate.link_helpers import confirm, follow, links_in_email
from tests.approvals.policy_helpers import seen
from tests.approvals.refund_helpers import refund_run_waiting
from tests.threads import in_threads


def text(response) -> str:
    return response.content.decode()


@pytest.mark.django_db
def test_each_supervisor_is_sent_links_of_their_own_naming_the_amount(demo):
    # when a refund of 20.00 pauses for a decision
    approval = refund_run_waiting().approval

    # then sam and sue each get an approve and a reject link of their own
    sam, sue = links_in_email(approval, "sam"), links_in_email(approval, "sue")
    assert set(sam) == set(sue) == {"approve", "reject"}
    assert len({*sam.values(), *sue.values()}) == 4
    body = Delivery.objects.get(recipient="sam@example.com").payload["body"]
    assert "Approve 20.00 EUR: " in body
    assert f"/portal/approvals/{approval.interrupt_id}/" in body
    links = DecisionLink.objects.filter(approval=approval)
    assert sorted(links.values_list("user__username", "decision")) == [
        ("sam", "approve"),
        ("sam", "reject"),
        ("sue", "approve"),
        ("sue", "reject"),
    ]
    assert {link.expires_at for link in links} == {approval.expires_at}
    assert {link.args_digest for link in links} == {approval.digest_on_the_table}


@pytest.mark.django_db
def test_following_a_link_signed_out_asks_to_confirm_and_decides_nothing(demo):
    # given
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["approve"]

    # when a mail scanner or the person follows the link, twice
    first, second = follow(token), follow(token)

    # then both show the call and a button, and nothing was decided or used
    for response in (first, second):
        assert response.status_code == 200
        assert "Approve 20.00 EUR?" in text(response)
        assert "You decide as sam" in text(response)
        assert 'id="link-confirm"' in text(response)
        assert token in text(response)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert not DecisionLink.objects.filter(used_at__isnull=False).exists()
    assert not RunEvent.objects.filter(run=approval.run, type="approval.decided").exists()


@pytest.mark.django_db
def test_confirming_approves_once_as_its_person_and_the_refund_is_paid_once(demo):
    # given
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["approve"]

    # when sam confirms, a worker continues, and sam clicks again
    done = confirm(token)
    worker.tick()
    again = confirm(token)
    followed_after = follow(token)

    # then the first decided as sam, via the email link, and paid 20.00 once
    assert done.status_code == 200
    assert "Approved" in text(done)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXECUTED
    assert approval.decided_by_name == "sam"
    decided = RunEvent.objects.get(run=approval.run, type="approval.decided")
    assert decided.data["via"] == "email_link"
    assert [str(refund.amount) for refund in Refund.objects.all()] == ["20.00"]
    assert AgentRun.objects.get(pk=approval.run_id).status == RunStatus.COMPLETED
    # and the second click, like the link followed later, says so and does nothing
    assert again.status_code == 409
    assert "You used this link" in text(again)
    assert "You used this link" in text(followed_after)
    assert Refund.objects.count() == 1


@pytest.mark.django_db
def test_a_reject_link_asks_why_and_the_customer_is_told(demo):
    # given
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sue")["reject"]

    # when sue confirms without a reason, then with one
    bare = confirm(token)
    still = Approval.objects.get(pk=approval.pk).status
    rejected = confirm(token, reason="The order was never paid")

    # then the first is a form error, the second rejects as sue
    assert bare.status_code == 200
    assert "Say why" in text(bare)
    assert still == ApprovalStatus.PENDING_APPROVAL
    assert rejected.status_code == 200
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.REJECTED
    assert (approval.decided_by_name, approval.reason) == ("sue", "The order was never paid")
    worker.tick()
    assert not Refund.objects.exists()


@pytest.mark.django_db
def test_a_link_refuses_once_a_colleague_decided(demo, api):
    # given sam's link, and sue approving in the portal's API first
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["reject"]
    response = api("sue").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        seen(approval, "approve", {"decision": "approve"}),
        format="json",
    )
    assert response.status_code == 200, response.json()

    # when sam follows his reject link and confirms
    followed, confirmed = follow(token), confirm(token, reason="too much")

    # then both say sue decided, and her approval stands
    assert "sue decided this call already" in text(followed)
    assert 'id="link-confirm"' not in text(followed)
    assert confirmed.status_code == 409
    assert "sue decided this call already" in text(confirmed)
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_name) == (
        ApprovalStatus.APPROVED_EXECUTING,
        "sue",
    )
    assert DecisionLink.objects.get(pk=DecisionLink.pk_of(token)).used_at is None


@pytest.mark.django_db
def test_a_colleagues_revision_makes_the_emailed_approval_decide_nothing(large_refund, api):
    # given: two approvals needed; sam's email offers 500.00; sue revises to 350.00
    approval = large_refund
    token = links_in_email(approval, "sam")["approve"]
    revised = {"order_id": "ORD-9001", "amount": "350.00", "reason": "partly used"}
    response = api("sue").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": "revise", "tool_args": revised},
        format="json",
    )
    assert response.status_code == 200, response.json()

    # when sam follows his link to approve 500.00, and confirms anyway
    followed, confirmed = follow(token), confirm(token)

    # then nothing counts as his approval of 350.00, which he never saw in that email
    assert "arguments changed" in text(followed)
    assert confirmed.status_code == 409
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert list(ApprovalVote.objects.filter(approval=approval).values_list("user__username")) == [
        ("sue",)
    ]
    worker.tick()
    assert not Refund.objects.exists()


@pytest.mark.django_db
def test_two_people_needed_are_two_links_of_two_people(large_refund):
    # given
    approval = large_refund
    sam, sue = links_in_email(approval, "sam"), links_in_email(approval, "sue")

    # when sam confirms, then sue
    first = confirm(sam["approve"])
    waiting = Approval.objects.get(pk=approval.pk).status
    second = confirm(sue["approve"])
    worker.tick()

    # then sam's was the first of two, sue's the second, and 500.00 was paid once
    assert first.status_code == second.status_code == 200
    assert "1 of 2 approvals" in text(first)
    assert waiting == ApprovalStatus.PENDING_APPROVAL
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXECUTED
    assert [str(refund.amount) for refund in Refund.objects.all()] == ["500.00"]
    given = RunEvent.objects.get(run=approval.run, type="approval.approval_given")
    assert given.data["via"] == "email_link"


@pytest.mark.django_db
def test_a_link_decides_nothing_once_its_person_no_longer_supervises(demo):
    # given sam's link, then his role in the shop revoked
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["approve"]
    Membership.objects.filter(user__username="sam", merchant=demo).update(active=False)

    # when he follows it and confirms
    followed, confirmed = follow(token), confirm(token)

    # then
    assert "no longer decide calls for" in text(followed)
    assert confirmed.status_code == 409
    assert "no longer decide calls for" in text(confirmed)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL


@pytest.mark.django_db
def test_a_link_decides_nothing_after_its_call_expired(demo):
    # given
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["approve"]

    # when sam confirms after the call's deadline
    with time_machine.travel(approval.expires_at + timedelta(seconds=1), tick=False):
        followed, confirmed = follow(token), confirm(token)

    # then it expired instead, and no money moved
    assert "expired" in text(followed)
    assert confirmed.status_code == 409
    assert "expired" in text(confirmed)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXPIRED
    worker.tick()
    assert not Refund.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/portal/decide/12.nonsense/", "/portal/decide/abc/"])
def test_a_token_this_site_did_not_sign_is_not_found(demo, path):
    # given a real link's token, with its key changed
    approval = refund_run_waiting().approval
    real = links_in_email(approval, "sam")["approve"]
    forged = f"{int(real.split('.')[0]) + 1}.{real.split('.')[1]}"

    # when
    responses = [Client().get(path), follow(forged), confirm(forged)]

    # then
    assert [response.status_code for response in responses] == [404, 404, 404]
    assert "not one of ours" in text(responses[1])
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING_APPROVAL


@pytest.mark.django_db(transaction=True)
def test_one_link_clicked_eight_times_at_once_decides_once(demo):
    # given
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["approve"]

    # when
    statuses = [response.status_code for response in in_threads([lambda: confirm(token)] * 8)]
    worker.tick()

    # then
    assert sorted(statuses) == [200] + [409] * 7
    assert RunEvent.objects.filter(run=approval.run, type="approval.decided").count() == 1
    assert Refund.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_link_and_a_colleagues_api_rejection_at_once_decide_once(demo, api):
    # given
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["approve"]
    client = api("sue")

    def reject_by_api():
        return client.post(
            f"/api/v1/approvals/{approval.interrupt_id}/decision",
            {"decision": "reject", "reason": "duplicate request"},
            format="json",
        ).status_code

    # when
    link_status, api_status = in_threads([lambda: confirm(token).status_code, reject_by_api])
    worker.tick()

    # then exactly one decided, and money moved only if the approval won
    assert sorted([link_status, api_status]) == [200, 409]
    approval.refresh_from_db()
    decided = RunEvent.objects.filter(run=approval.run, type="approval.decided")
    assert decided.count() == 1
    if link_status == 200:
        assert approval.decided_by_name == "sam"
        assert Refund.objects.count() == 1
    else:
        assert (approval.status, approval.decided_by_name) == (ApprovalStatus.REJECTED, "sue")
        assert not Refund.objects.exists()
        assert DecisionLink.objects.get(pk=DecisionLink.pk_of(token)).used_at is None


@pytest.mark.django_db
def test_a_call_reassigned_to_a_colleague_stops_the_emailed_links_of_others(demo, api):
    # given sam's and sue's links, then the call assigned to sue
    approval = refund_run_waiting().approval
    sam, sue = links_in_email(approval, "sam"), links_in_email(approval, "sue")
    response = api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/assign", {"user": "sue"}, format="json"
    )
    assert response.status_code == 200, response.json()

    # when sam follows his link and confirms, then sue confirms hers
    followed, refused = follow(sam["approve"]), confirm(sam["approve"])
    done = confirm(sue["approve"])

    # then sam's decided nothing and said why; sue's, whose call it is, approved
    assert "assigned to sue after this email was sent" in text(followed)
    assert refused.status_code == 409
    assert done.status_code == 200
    approval.refresh_from_db()
    assert approval.decided_by_name == "sue"


@pytest.mark.django_db
def test_a_call_assigned_to_a_group_of_the_links_person_keeps_the_link(demo):
    # given sam's link, then the call assigned to a group he is in
    approval = refund_run_waiting().approval
    token = links_in_email(approval, "sam")["approve"]
    group = ApproverGroup.objects.create(merchant=demo, name="Refunds")
    group.members.add(User.objects.get(username="sam"))
    Approval.objects.filter(pk=approval.pk).update(assigned_group=group, assigned_at=timezone.now())

    # when
    done = confirm(token)

    # then
    assert done.status_code == 200
    assert Approval.objects.get(pk=approval.pk).decided_by_name == "sam"

"""The admin as a supervisor uses it: scoped to their shops, deciding through the service."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentportal.models import Merchant
from agentportal.services import membership_revoke
from approvals.models import Approval, ApprovalStatus
from runs import worker
from tests import factories
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import signed_in


def _act(client: Client, approval: Approval, action: str, reason: str = ""):
    return client.post(
        "/admin/approvals/approval/",
        {"action": action, "_selected_action": [approval.pk], "reason": reason},
        follow=True,
    )


def test_supervisor_sees_only_their_shops_approvals(demo):
    # given: a pending call in each shop
    ours = refund_run_waiting().approval
    other = Merchant.objects.get(slug="other-shop")
    olga = User.objects.get(username="olga")
    factories.run_queue(customer=olga, merchant=other, message="refund ORD-9001 amount 5")
    worker.tick()
    theirs = Approval.objects.get(merchant=other)

    # when
    page = signed_in("sam").get("/admin/approvals/approval/")

    # then
    assert page.status_code == 200
    assert ours.interrupt_id in page.text
    assert theirs.interrupt_id not in page.text
    assert signed_in("sam").get(f"/admin/approvals/approval/{theirs.pk}/change/").status_code in (
        302,
        404,
    )


def test_the_admin_approves_no_money_in_bulk(demo):
    # given two refunds waiting
    first, second = (
        refund_run_waiting().approval,
        refund_run_waiting("I want a refund for ORD-1004 amount 30").approval,
    )
    sam = signed_in("sam")

    # when sam looks for a bulk approve, and sends one anyway
    listing = sam.get("/admin/approvals/approval/").text
    sent = sam.post(
        "/admin/approvals/approval/",
        {"action": "approve_selected", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )

    # then there is none: each call is approved on its own page, seeing what it pays
    assert 'value="approve_selected"' not in listing
    assert 'value="reject_selected"' in listing
    assert sent.status_code == 200
    for approval in (first, second):
        approval.refresh_from_db()
        assert approval.status == ApprovalStatus.PENDING_APPROVAL
        assert not approval.votes.exists()


def test_reject_action_reports_who_decided_first(demo):
    approval = refund_run_waiting().approval

    first = _act(signed_in("sam"), approval, "reject_selected", reason="order too old")
    second = _act(signed_in("sue"), approval, "reject_selected", reason="too old")

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.REJECTED
    assert approval.decided_by.username == "sam"
    assert f"Approval {approval.interrupt_id}: rejected." in first.text
    assert "already decided by sam" in second.text


def test_reject_action_needs_a_reason(demo):
    approval = refund_run_waiting().approval

    refused = _act(signed_in("sam"), approval, "reject_selected")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert "needs a reason" in refused.text

    _act(signed_in("sam"), approval, "reject_selected", reason="order too old")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.REJECTED
    assert approval.reason == "order too old"


def test_decide_page_revises_the_arguments(demo):
    approval = refund_run_waiting().approval
    url = f"/admin/approvals/approval/{approval.pk}/decide/"
    sam = signed_in("sam")
    assert "ORD-1003" in sam.get(url).text

    # when: an amount the tool's schema refuses
    bad = sam.post(url, {"decision": "revise", "tool_args": '{"order_id": "ORD-1003"}'})

    # then: a form error, nothing decided
    assert bad.status_code == 200
    assert "tool_args.amount" in bad.text
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL

    # when: a valid revision
    revised = '{"order_id": "ORD-1003", "amount": "5.00", "reason": "partial"}'
    sam.post(url, {"decision": "revise", "tool_args": revised})

    # then
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED_EXECUTING
    assert approval.approved_args["amount"] == "5.00"
    assert approval.proposed_args["amount"] == "20.00"


def test_revoked_supervisor_can_no_longer_decide_in_the_admin(demo):
    approval = refund_run_waiting().approval
    sam = signed_in("sam")
    assert sam.get(f"/admin/approvals/approval/{approval.pk}/decide/").status_code == 200

    membership_revoke(membership=demo.memberships.get(user__username="sam"))
    _act(sam, approval, "reject_selected", reason="order too old")

    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL


@pytest.mark.parametrize("path", ["/admin/runs/agentrun/", "/admin/approvals/approval/"])
def test_supervisor_pages_render(demo, path):
    refund_run_waiting()
    assert signed_in("sam").get(path).status_code == 200


def test_a_webhook_needs_a_signing_secret(demo, settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "WEBHOOK_ALLOW_PRIVATE": True}
    admin = signed_in("admin")
    response = admin.post(
        f"/admin/agentportal/merchant/{demo.pk}/change/",
        {
            "slug": demo.slug,
            "name": demo.name,
            "active": "on",
            "max_running_runs": 8,
            "reserved_slots": 0,
            "webhook_url": "http://127.0.0.1:9/hook",
            "webhook_secret": "short",
        },
    )
    assert response.status_code == 200
    assert "needs a secret" in response.text
    demo.refresh_from_db()
    assert demo.webhook_url == ""

"""The portal's pages for a call that needs two supervisors: who approved it already, who may
still approve it, and the escalated ones first."""

import re
from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from approvals.gate import escalation
from approvals.models import Approval, ApprovalStatus, ApprovalVote, Refund
from runs import worker
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.pages import inbox_rows, page_text, signed_in

pytestmark = pytest.mark.django_db

APPROVE_BUTTON = 'name="action" value="approve"'


def _page(client: Client, approval: Approval, **post) -> str:
    path = f"/portal/approvals/{approval.interrupt_id}/"
    if post and "args_digest" not in post:
        # As a browser does: the form sends the digest of the arguments the page showed.
        shown = re.search(r'name="args_digest" value="([0-9a-f]*)"', page_text(client.get(path)))
        post = {**post, "args_digest": shown.group(1) if shown else ""}
    response = client.post(path, post, follow=True) if post else client.get(path)
    assert response.status_code == 200
    return page_text(response)


def _row(inbox: str, approval: Approval) -> str:
    """The inbox row of one call."""
    found = re.search(rf'<tr data-interrupt="{approval.interrupt_id}">(.*?)</tr>', inbox)
    assert found, f"{approval.interrupt_id} is not in the inbox"
    return found.group(1)


def test_before_anyone_approved_the_pages_say_two_approvals_are_needed(large_refund):
    sam = signed_in("sam")

    inbox = page_text(sam.get("/portal/"))
    page = _page(sam, large_refund)

    assert "needs 2 approvals" in _row(inbox, large_refund)
    assert "Needs 2 approvals: none given yet." in page
    assert '<p class="muted" id="policy">Policy: two approvers from 200.00 (version 1)</p>' in page
    assert APPROVE_BUTTON in page
    assert "Changing the arguments starts the count again" in page


def test_after_his_approval_sam_sees_it_waiting_for_another_supervisor_and_cannot_approve(
    large_refund,
):
    sam = signed_in("sam")

    # when sam approves
    done = _page(sam, large_refund, action="approve")

    # then he is told it waits for a second person, and nothing ran
    assert "Approved (1 of 2 approvals): another supervisor must approve it too" in done
    large_refund.refresh_from_db()
    assert large_refund.status == ApprovalStatus.PENDING_APPROVAL

    # then his page names his approval, offers no approve button, and still lets him reject
    # or revise (a revision starts the count again, and says so)
    page = _page(sam, large_refund)
    assert re.search(
        r'Needs 2 approvals: 1 given by <strong>sam</strong> at <time datetime="[^"]+">'
        r"\d{4}-\d\d-\d\d \d\d:\d\d UTC</time>\.",
        page,
    )
    assert "You approved this; it waits for another supervisor." in page
    assert APPROVE_BUTTON not in page
    assert 'value="reject"' in page and 'value="preview"' in page
    assert (
        "Changing the arguments starts the count again: your changes count as the first of 2 "
        "approvals, and another supervisor must approve them."
    ) in page

    # then his inbox says the call waits for someone else
    row = _row(page_text(sam.get("/portal/inbox/rows/")), large_refund)
    assert (
        '1 of 2 approvals: you</span><br><strong class="waiting-for-another">'
        "Waiting for another supervisor</strong>"
    ) in row


def test_sue_sees_sams_approval_and_her_approval_completes_the_call(large_refund):
    _page(signed_in("sam"), large_refund, action="approve")
    sue = signed_in("sue")

    # when sue looks at her inbox and the call
    row = _row(page_text(sue.get("/portal/")), large_refund)
    page = _page(sue, large_refund)

    # then she reads sam's approval, and may give the second
    assert "1 of 2 approvals: sam</span>" in row
    assert "Waiting for another supervisor" not in row
    assert "Needs 2 approvals: 1 given by <strong>sam</strong> at" in page
    assert "You approved this" not in page
    assert APPROVE_BUTTON in page

    # when she approves
    done = _page(sue, large_refund, action="approve")

    # then the call is decided, both approvals are named, and the refund is paid once
    assert "Approved: the agent carries on and runs the call." in done
    assert "Approvals given: <strong>sam</strong> at" in done
    assert ", <strong>sue</strong> at" in done
    large_refund.refresh_from_db()
    assert large_refund.status == ApprovalStatus.APPROVED_EXECUTING
    assert large_refund.decided_by.username == "sue"
    worker.tick()
    assert Refund.objects.get().amount == Decimal("500.00")
    assert large_refund.interrupt_id not in page_text(sue.get("/portal/inbox/rows/"))


def test_approving_twice_from_a_page_drawn_before_is_said_on_the_page_not_an_error(large_refund):
    # given sam's two tabs on the call: he approves in the first
    sam = signed_in("sam")
    _page(sam, large_refund, action="approve")

    # when he presses approve in the second, drawn before his approval
    response = sam.post(
        f"/portal/approvals/{large_refund.interrupt_id}/",
        {"action": "approve", "args_digest": large_refund.digest_on_the_table},
    )

    # then the page says why nothing happened; his one approval stands
    assert response.status_code == 200
    page = page_text(response)
    assert (
        '<li class="warning">You approved these arguments already; another supervisor must '
        "approve them too. Nothing was changed.</li>"
    ) in page
    assert "You approved this; it waits for another supervisor." in page
    assert APPROVE_BUTTON not in page
    assert ApprovalVote.objects.filter(approval=large_refund).count() == 1
    large_refund.refresh_from_db()
    assert large_refund.status == ApprovalStatus.PENDING_APPROVAL


def test_sams_changes_count_as_his_approval_and_sue_approves_them(large_refund):
    sam, sue = signed_in("sam"), signed_in("sue")

    # when sam revises the amount in the typed form
    done = _page(
        sam,
        large_refund,
        action="revise",
        **{"arg-order_id": "ORD-9001", "arg-amount": "350.00", "arg-reason": "partly used"},
    )

    # then his changes are his approval, and the call waits for a second one
    assert "Your changes count as your approval (1 of 2 approvals)" in done
    assert "Needs 2 approvals: 1 given by <strong>sam</strong> (with changes) at" in done

    # then sue reads what an approval now approves: sam's changes, in the form too
    row = _row(page_text(sue.get("/portal/")), large_refund)
    page = _page(sue, large_refund)
    assert "1 of 2 approvals: sam (with changes)" in row
    assert "<h2>Changed by sam, waiting for another approval</h2>" in page
    assert "Approve sam&#x27;s changes: 350.00 EUR</button>" in page
    assert 'name="arg-amount" value="350.00"' in page
    # the warnings judge what she would approve: alice asked for 500
    assert "The customer never wrote 350.00 in their messages" in page

    # when she approves them, the refund paid is sam's
    _page(sue, large_refund, action="approve")
    worker.tick()
    assert Refund.objects.get().amount == Decimal("350.00")


def test_an_escalated_call_comes_first_in_the_inbox_marked_with_when(demo):
    # given a 20.00 refund, then a larger one whose time to be decided has passed
    policy_set(demo, two_approvers_from="200.00", escalate_after_seconds=600)
    big_order(demo)
    older = approval_of(refund_run(demo, "20"))
    late = approval_of(refund_run(demo, "500", order="ORD-9001"))
    Approval.objects.filter(pk=late.pk).update(escalate_at=timezone.now() - timedelta(seconds=1))
    assert escalation.approval_escalate(interrupt_id=late.interrupt_id)
    late.refresh_from_db()
    sue = signed_in("sue")

    # when sue opens her inbox and the escalated call
    inbox = page_text(sue.get("/portal/"))
    page = _page(sue, late)

    # then it is listed first, marked escalated with the time, and the page says when
    assert inbox_rows(inbox) == [late.interrupt_id, older.interrupt_id]
    at = late.escalated_at.astimezone(UTC)
    assert '<span class="badge escalated">Escalated at <time datetime="' in _row(inbox, late)
    assert f"{at:%H:%M} UTC</time></span>" in _row(inbox, late)
    assert "Escalated" not in _row(inbox, older)
    assert "Escalated at <time" in page and f">{at:%Y-%m-%d %H:%M} UTC</time>" in page
    assert "nobody decided it in time" in page
    assert (
        "Policy: two approvers from 200.00, escalated after 10 minutes undecided (version 1)"
    ) in page


def test_a_small_refund_under_the_policy_needs_one_approval_and_names_the_policy(demo):
    policy_set(demo, two_approvers_from="200.00")
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")

    row = _row(page_text(sam.get("/portal/")), approval)
    page = _page(sam, approval)

    assert 'class="approvals"' not in row
    assert 'id="approvals"' not in page
    assert "Policy: two approvers from 200.00 (version 1)" in page
    assert APPROVE_BUTTON in page
    assert 'id="revise-hint"' not in page

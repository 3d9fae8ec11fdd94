"""The decision pages decide only what their supervisor saw and meant (DESIGN 6.1.1): a page
drawn before a colleague's change approves nothing and shows the change, an edited argument is
never dropped for an approve as proposed, a revision is judged by the same warnings as the
call, and the admin approves no money in bulk."""

import json
import re

import pytest
from django.test import Client

from approvals.models import Approval, ApprovalStatus, ApprovalVote, Refund, args_digest
from runs import worker
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.pages import page_text, signed_in

pytestmark = pytest.mark.django_db

APPROVE_BUTTON = 'name="action" value="approve"'
REVISE_BUTTON = 'name="action" value="revise"'


def _path(approval: Approval) -> str:
    return f"/portal/approvals/{approval.interrupt_id}/"


def _shown_digest(page: str) -> str:
    return re.search(r'name="args_digest" value="([0-9a-f]{64})"', page).group(1)


def _typed(amount: str, order: str = "ORD-1003", reason: str = "customer request") -> dict:
    return {"arg-order_id": order, "arg-amount": amount, "arg-reason": reason}


def _post(client: Client, approval: Approval, body: dict) -> str:
    response = client.post(_path(approval), body, follow=True)
    assert response.status_code == 200
    return page_text(response)


def _nothing_recorded(approval: Approval, *, votes: int = 0) -> None:
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert ApprovalVote.objects.filter(approval=approval).count() == votes
    worker.tick()
    assert not Refund.objects.exists()


@pytest.fixture
def revised_under_sue(demo) -> tuple[Approval, str]:
    """A 45.00 call that needs two people, on sue's screen; then sam revises it to 4000.00."""
    policy_set(demo, two_approvers_from="40.00")
    big_order(demo, total="9000.00")
    approval = approval_of(refund_run(demo, "45", order="ORD-9001"))
    sue_page = page_text(signed_in("sue").get(_path(approval)))
    _post(
        signed_in("sam"),
        approval,
        {
            "action": "revise",
            "args_digest": _shown_digest(sue_page),
            **_typed("4000.00", order="ORD-9001"),
        },
    )
    approval.refresh_from_db()
    assert approval.arguments_on_the_table["amount"] == "4000.00"
    return approval, sue_page


# --- 2. a page drawn before a colleague's change -------------------------------------------------


def test_an_approve_from_a_page_drawn_before_a_revision_shows_the_change_and_no_approve(
    revised_under_sue,
):
    approval, sue_page = revised_under_sue
    sue = signed_in("sue")

    # when sue presses approve on the page she loaded before sam's revision
    page = _post(
        sue,
        approval,
        {
            "action": "approve",
            "args_digest": _shown_digest(sue_page),
            **_typed("45.00", "ORD-9001"),
        },
    )

    # then nothing is recorded for her, and her page says who changed what, as news
    _nothing_recorded(approval, votes=1)
    assert (
        '<li class="warning">sam changed this to 4000.00 EUR while you were looking. '
        "Nothing was recorded: here is the call as it is now.</li>"
    ) in page
    assert '<ul class="errorlist' not in page
    # it shows the new arguments, and offers no approve until she reloads
    assert "<h2>Changed by sam, waiting for another approval</h2>" in page
    assert "<dd>4000.00 EUR</dd>" in page
    assert 'name="arg-amount" value="4000.00"' in page
    assert APPROVE_BUTTON not in page

    # when she reloads, the page is the normal one for the new arguments
    reloaded = page_text(sue.get(_path(approval)))
    assert APPROVE_BUTTON in reloaded
    assert "Approve sam&#x27;s changes: 4000.00 EUR</button>" in reloaded
    assert "while you were looking" not in reloaded


def test_a_change_of_another_tools_arguments_is_said_without_an_amount(revised_under_sue):
    approval, sue_page = revised_under_sue
    Approval.objects.filter(pk=approval.pk).update(tool_name="custom_tool")

    page = _post(
        signed_in("sue"),
        approval,
        {
            "action": "approve",
            "args_digest": _shown_digest(sue_page),
            "tool_args": json.dumps(approval.proposed_args),
        },
    )

    assert "sam changed the arguments while you were looking." in page
    assert APPROVE_BUTTON not in page
    _nothing_recorded(approval, votes=1)


def test_an_approve_from_an_admin_page_drawn_before_a_revision_shows_the_change(
    revised_under_sue,
):
    approval, _ = revised_under_sue
    url = f"/admin/approvals/approval/{approval.pk}/decide/"

    # when sue sends the admin's decide page she loaded before sam's revision: approve 45.00
    response = signed_in("sue").post(
        url,
        {
            "decision": "approve",
            "tool_args": json.dumps(approval.proposed_args),
            "args_digest": args_digest(approval.proposed_args),
        },
    )

    # then nothing is recorded, and the page says so and shows the new arguments
    page = page_text(response)
    assert response.status_code == 200
    # (the admin capitalises its messages)
    assert "Sam changed this to 4000.00 EUR while you were looking." in page
    assert "&quot;amount&quot;: &quot;4000.00&quot;" in page
    assert 'value="approve"' not in page
    _nothing_recorded(approval, votes=1)


def test_an_admin_approve_with_edited_arguments_approves_nothing(demo):
    approval = approval_of(refund_run(demo, "20"))
    edited = {**approval.proposed_args, "amount": "5.00"}

    response = signed_in("sam").post(
        f"/admin/approvals/approval/{approval.pk}/decide/",
        {
            "decision": "approve",
            "tool_args": json.dumps(edited),
            "args_digest": approval.digest_on_the_table,
        },
    )

    assert response.status_code == 200
    assert "You changed the arguments: pick Revise to approve your changes" in page_text(response)
    _nothing_recorded(approval)


# --- 3. an edit is never dropped for an approve ---------------------------------------------------


def test_an_approve_sent_with_edited_arguments_approves_nothing_and_keeps_the_edit(demo):
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")
    shown = page_text(sam.get(_path(approval)))

    # when the typed form is sent with 5 in the amount and the approve (a page without script)
    page = _post(
        sam, approval, {"action": "approve", "args_digest": _shown_digest(shown), **_typed("5")}
    )

    # then nothing is approved, he is told why, and his edit is still there
    assert (
        "You changed the arguments: review your changes, or reload to approve as proposed."
    ) in page
    assert 'name="arg-amount" value="5"' in page
    _nothing_recorded(approval)


def test_the_buttons_say_what_each_executes_and_review_is_the_forms_first(demo):
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")

    page = page_text(sam.get(_path(approval)))

    # Enter in a field presses its form's first button: reviewing, never approving
    typed_form = _form(page, "typed-form")
    assert re.findall(r'name="action" value="(\w+)"', typed_form) == ["preview", "approve"]
    json_form = _form(page, "json-form")
    assert re.findall(r'name="action" value="(\w+)"', json_form) == ["preview"]
    assert ">Approve 20.00 EUR as proposed</button>" in page

    # when he reviews 5.00
    preview = _post(
        sam, approval, {"action": "preview", "args_digest": _shown_digest(page), **_typed("5")}
    )

    # then the revised call is approved from its own form, which names it
    assert ">Approve the revised call: 5.00 EUR</button>" in preview
    revise_form = _form(preview, "revise-form")
    assert re.findall(r'name="action" value="(\w+)"', revise_form) == ["revise"]
    _post(sam, approval, _fields(revise_form))
    worker.tick()
    assert [str(refund.amount) for refund in Refund.objects.all()] == ["5.00"]


def _form(page: str, form_id: str) -> str:
    return re.search(rf'<form method="post" id="{form_id}"[^>]*>(.*?)</form>', page).group(1)


def _fields(form_html: str) -> dict:
    """What a browser sends for a form of hidden fields and one button."""
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form_html))
    fields["tool_args"] = fields["tool_args"].replace("&quot;", '"')
    return {**fields, "action": "revise"}


# --- 5. a revision is judged as the call is --------------------------------------------------


def test_a_revision_over_what_is_refundable_is_warned_and_cannot_be_approved(demo):
    # given a 20.00 refund on alice's 59.00 ORD-1003
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")
    digest = _shown_digest(page_text(sam.get(_path(approval))))

    # when sam reviews 1000.00
    preview = _post(sam, approval, {"action": "preview", "args_digest": digest, **_typed("1000")})

    # then the review warns as the page does for a call, and offers no approve of it
    revision = re.search(r'<div id="revision-warnings"(.*?)</div>', preview).group(1)
    assert "The refund of 1000.00 EUR is more than the 59.00 EUR still refundable" in revision
    assert "Nothing looks off" not in revision
    assert REVISE_BUTTON not in preview
    assert "This revision cannot be approved" in preview

    # when the revision is sent anyway
    refused = _post(sam, approval, {"action": "revise", "args_digest": digest, **_typed("1000")})

    # then it is refused beside the form, and nothing is recorded or paid
    assert "This revision cannot be approved: the refund of 1000.00 EUR is more than" in refused
    _nothing_recorded(approval)


def test_a_revision_the_customer_asked_for_has_nothing_to_warn_about(demo):
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")
    digest = _shown_digest(page_text(sam.get(_path(approval))))

    preview = _post(sam, approval, {"action": "preview", "args_digest": digest, **_typed("20.00")})

    assert "Nothing looks off in the revision" in preview
    assert REVISE_BUTTON in preview


def test_the_order_is_picked_from_the_customers_own_orders(demo):
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")

    page = page_text(sam.get(_path(approval)))

    picker = re.search(r'<select name="arg-order_id"[^>]*>(.*?)</select>', page).group(1)
    assert re.findall(r'<option value="([^"]+)"', picker) == [
        "ORD-1001",
        "ORD-1002",
        "ORD-1003",
        "ORD-1004",
        "ORD-1005",
    ]
    assert re.search(r'<option value="ORD-1003"[^>]* selected>', picker)
    assert "ORD-1003 · 59.00 EUR refundable" in picker


def test_a_revision_to_another_customers_order_is_refused_in_the_typed_form(demo):
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")
    digest = _shown_digest(page_text(sam.get(_path(approval))))

    # when bob's order is sent as the order of alice's refund
    refused = _post(
        sam, approval, {"action": "revise", "args_digest": digest, **_typed("20", "ORD-2001")}
    )

    # then it is not one to pick, and nothing is recorded
    assert "Select a valid choice" in refused
    _nothing_recorded(approval)


def test_a_revision_to_another_customers_order_is_refused_in_the_json_editor(demo):
    approval = approval_of(refund_run(demo, "20"))
    sam = signed_in("sam")
    digest = _shown_digest(page_text(sam.get(_path(approval))))
    revised = {"tool_args": json.dumps({**approval.proposed_args, "order_id": "ORD-2001"})}

    preview = _post(sam, approval, {"action": "preview", "args_digest": digest, **revised})
    refused = _post(sam, approval, {"action": "revise", "args_digest": digest, **revised})

    assert "ORD-2001 is not an order of this customer in this shop" in preview
    assert REVISE_BUTTON not in preview
    assert "This revision cannot be approved: ORD-2001 is not an order of this customer" in refused
    _nothing_recorded(approval)

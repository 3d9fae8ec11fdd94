"""The inbox's views of who is on a call, the "I'm on it" button, and the call's page saying
who has it."""

import re

import pytest
from django.contrib.auth.models import User

from approvals.models import Approval, ApproverGroup
from runs.models import RunEvent
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import inbox_rows, page_text, signed_in


@pytest.fixture
def three_calls(demo) -> dict[str, Approval]:
    """Calls assigned to sam, to the group Finance (sue's), and to nobody."""
    calls = {
        "sam": refund_run_waiting("refund ORD-1003 amount 20").approval,
        "finance": refund_run_waiting("refund ORD-2001 amount 9", customer="bob").approval,
        "nobody": refund_run_waiting("refund ORD-1004 amount 30").approval,
    }
    group = ApproverGroup.objects.create(merchant=demo, name="Finance")
    group.members.add(User.objects.get(username="sue"))
    Approval.objects.filter(pk=calls["sam"].pk).update(
        assigned_user=User.objects.get(username="sam"), assigned_at=calls["sam"].created_at
    )
    Approval.objects.filter(pk=calls["finance"].pk).update(
        assigned_group=group, assigned_at=calls["finance"].created_at
    )
    return calls


@pytest.mark.django_db
def test_each_view_lists_its_calls_and_the_tabs_count_them(three_calls):
    sam, sue = signed_in("sam"), signed_in("sue")
    ids = {name: call.interrupt_id for name, call in three_calls.items()}

    # then
    assert sorted(inbox_rows(sam.get("/portal/"))) == sorted(ids.values())
    assert inbox_rows(sam.get("/portal/?view=mine")) == [ids["sam"]]
    assert inbox_rows(sam.get("/portal/?view=groups")) == []
    assert inbox_rows(sue.get("/portal/?view=groups")) == [ids["finance"]]
    assert inbox_rows(sue.get("/portal/?view=unassigned")) == [ids["nobody"]]
    assert inbox_rows(sue.get("/portal/inbox/rows/?view=groups")) == [ids["finance"]]
    tabs = page_text(sue.get("/portal/?view=groups"))
    assert "All (3)" in tabs and "Assigned to me (0)" in tabs
    assert "My groups (1)" in tabs and "Unassigned (1)" in tabs
    assert 'aria-current="page">My groups' in tabs


@pytest.mark.django_db
def test_rows_say_who_is_on_each_call_and_offer_to_take_the_others(three_calls):
    page = page_text(signed_in("sam").get("/portal/"))

    def row(name):
        interrupt = three_calls[name].interrupt_id
        return re.search(rf'data-interrupt="{interrupt}".*?</tr>', page).group(0)

    assert "You are on it" in row("sam")
    assert "Group Finance" in row("finance")
    assert "I'm on it" in row("nobody") and "I'm on it" not in row("sam")


@pytest.mark.django_db
def test_im_on_it_claims_the_call_and_returns_to_the_same_view(three_calls):
    # given
    call = three_calls["nobody"]
    sue = signed_in("sue")

    # when sue presses the button in her "unassigned" view
    pressed = sue.post(
        f"/portal/approvals/{call.interrupt_id}/claim/",
        {"next": "/portal/?view=unassigned&sort=age"},
        follow=True,
    )

    # then the call is hers, the view she came from says so, and the timeline has it
    assert pressed.redirect_chain[-1][0] == "/portal/?view=unassigned&sort=age"
    assert "You are on it" in page_text(pressed)
    assert Approval.objects.get(pk=call.pk).assigned_user.username == "sue"
    assert inbox_rows(pressed) == []
    assert RunEvent.objects.filter(run=call.run, type="approval.assigned").count() == 1


@pytest.mark.django_db
def test_the_calls_page_says_who_has_it_and_offers_to_take_it_over(three_calls):
    # given sam's call, opened by sue
    call = three_calls["sam"]
    url = f"/portal/approvals/{call.interrupt_id}/"
    sue = signed_in("sue")
    before = page_text(sue.get(url))

    # when she takes it over from its page; and a claim pointing elsewhere comes back here
    taken = sue.post(
        f"/portal/approvals/{call.interrupt_id}/claim/",
        {"next": "https://elsewhere.example/"},
        follow=True,
    )

    # then
    assert "sam</strong> is on it since" in before and "Take it over" in before
    assert "Anyone the policy allows may still decide" in before
    assert taken.redirect_chain[-1][0] == url
    assert "You are on it" in page_text(taken)
    assert Approval.objects.get(pk=call.pk).assigned_user.username == "sue"


@pytest.mark.django_db
def test_a_customer_or_another_shop_cannot_claim(three_calls):
    call = three_calls["nobody"]

    for who in ("alice", "oscar"):
        response = signed_in(who).post(f"/portal/approvals/{call.interrupt_id}/claim/")
        assert response.status_code == 404
    assert signed_in("sam").get(f"/portal/approvals/{call.interrupt_id}/claim/").status_code == 405
    assert Approval.objects.get(pk=call.pk).assigned_at is None

"""Trying policy rules on a shop's past refunds: each figure checked by hand against a seeded
history, and nothing changed by asking."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agentportal.models import Role
from approvals.models import Approval, ApprovalPolicy
from tests import factories
from tests.approvals.policy_helpers import policy_set, seen
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import signed_in

SIMULATE = "/api/v1/policies/issue_refund/simulate"
RULES = {
    "amount_field": "amount",
    "auto_approve_up_to": "10.00",
    "two_approvers_from": "40.00",
    "escalate_after_seconds": None,
}


def decide(api, approval, decision, **body):
    response = api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        seen(approval, decision, {"decision": decision, **body}),
        format="json",
    )
    assert response.status_code == 200, response.json()


@pytest.fixture
def history(demo, api):
    """Five refunds asked for: 5.00 approved, 8.00 rejected, 9.00 revised to 4.00 (each within
    the proposed auto-approval), 50.00 approved (over the four-eyes threshold), 20.00 still
    waiting."""
    calls = {
        "5": refund_run_waiting("refund ORD-1003 amount 5").approval,
        "8": refund_run_waiting("refund ORD-2001 amount 8", customer="bob").approval,
        "9": refund_run_waiting("refund ORD-1004 amount 9").approval,
    }
    decide(api, calls["5"], "approve")
    decide(api, calls["8"], "reject", reason="no such parcel")
    decide(
        api,
        calls["9"],
        "revise",
        tool_args={"order_id": "ORD-1004", "amount": "4.00", "reason": "customer request"},
    )
    calls["50"] = refund_run_waiting("refund ORD-1004 amount 50").approval
    decide(api, calls["50"], "approve")
    calls["20"] = refund_run_waiting("refund ORD-1003 amount 20").approval
    return calls


@pytest.fixture
def olivia(demo):
    return factories.user_create("olivia", merchant=demo, role=Role.OPERATOR)


@pytest.mark.django_db
def test_each_figure_of_a_proposed_policy_on_a_seeded_history(history, olivia, api):
    # when the operator tries the rules on the last two days
    now = timezone.now()
    response = api("olivia").post(
        SIMULATE,
        {**RULES, "since": (now - timedelta(days=2)).isoformat(), "until": now.isoformat()},
        format="json",
    )

    # then, by hand: 5, 8 and 9 would have been paid with no person (22.00), of which a person
    # rejected 8 (8.00 against them) and revised 9 to 4 (5.00 against them); 50 and 20 wait for
    # people, 50 for two; two calls in two days is one a day
    assert response.status_code == 200, response.json()
    figures = response.json()
    assert figures["calls"] == 5
    assert figures["auto_approved"] == 3
    assert figures["auto_approved_money"] == "22.00"
    assert figures["auto_approved_people_rejected"] == 1
    assert figures["auto_approved_people_revised"] == 1
    assert figures["money_against_people"] == "13.00"
    assert figures["two_approvers"] == 1
    assert figures["waiting_for_people"] == 2
    assert figures["inbox_per_day"] == 1.0
    assert figures["truncated"] is False
    # and asking changed nothing: no policy, the calls as they were
    assert not ApprovalPolicy.objects.exists()
    assert Approval.objects.filter(decided_by_policy=True).count() == 0


@pytest.mark.django_db
def test_a_period_before_the_calls_replays_none(history, olivia, api):
    long_ago = timezone.now() - timedelta(days=300)

    response = api("olivia").post(
        SIMULATE,
        {
            **RULES,
            "since": long_ago.isoformat(),
            "until": (long_ago + timedelta(days=1)).isoformat(),
        },
        format="json",
    )

    assert response.json()["calls"] == 0
    assert response.json()["inbox_per_day"] == 0.0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**RULES, "auto_approve_up_to": "50.00"}, "two_approvers_from"),
        ({**RULES, "amount_field": "reason"}, "amount_field"),
        ({**RULES, "since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"),
    ],
)
def test_rules_that_do_not_fit_are_a_problem(demo, olivia, api, body, field):
    response = api("olivia").post(SIMULATE, body, format="json")

    assert response.status_code == 400, response.json()
    assert field in {error["field"] for error in response.json()["errors"]}


@pytest.mark.django_db
def test_only_operators_and_service_keys_try_rules(demo, olivia, api):
    assert api("sam").post(SIMULATE, RULES, format="json").status_code == 403
    assert api("alice").post(SIMULATE, RULES, format="json").status_code == 403
    assert api(None).post(SIMULATE, RULES, format="json").status_code == 200


@pytest.mark.django_db
def test_the_policy_admin_tries_rules_before_saving(history, olivia, demo):
    # given the shop's policy, as its operator sees it in the admin
    policy = policy_set(demo, auto_approve_up_to="1.00")
    admin = signed_in("olivia")
    page = admin.get(f"/admin/approvals/approvalpolicy/{policy.pk}/change/").content.decode()
    try_url = f"/admin/approvals/approvalpolicy/{policy.pk}/try/"

    # when she tries auto-approval up to 10.00 and four eyes from 40.00
    tried = admin.post(
        try_url,
        {
            "amount_field": "amount",
            "auto_approve_up_to": "10.00",
            "two_approvers_from": "40.00",
            "escalate_to_operators": "on",
        },
    ).content.decode()

    # then the change page led there, the figures are shown, and the policy is unchanged
    assert try_url in page
    assert "Approved by these rules, with no person</th><td>3 (22.00)" in tried
    assert "Money these rules would have paid against those decisions</th><td>13.00" in tried
    policy.refresh_from_db()
    assert (policy.current.version, policy.current.auto_approve_up_to) == (1, Decimal("1.00"))
    # and a supervisor has no such page
    assert signed_in("sam").get(try_url).status_code in (302, 403, 404)

"""Approver bands: which band a call falls in, how the admin writes them, the policy's checks
over REST and in the admin, and decisions one after another under "2 of Finance from 200.00,
1 of Support below": who counts, who is refused and why, and what the pages say. (Decisions
at once: test_quorum_races; random sequences: test_quorum_state_machine.)"""

import json
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from agentportal.models import Role
from approvals.gate.assignment import approver_group_set
from approvals.gate.bands import ApproverBand, band_for, bands_parse, bands_text
from approvals.models import ApprovalPolicy, ApprovalStatus, ApprovalVote, Delivery
from runs import worker
from runs.models import RunStatus
from tests import factories
from tests.approvals.gate.link_helpers import confirm, follow, links_in_email
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run, seen
from tests.pages import signed_in
from tests.problems import assert_problem

FINANCE_AND_SUPPORT = [("200.00", 2, "Finance"), (None, 1, "Support")]


def band(start, approvals, group=None) -> ApproverBand:
    return ApproverBand(
        from_amount=None if start is None else Decimal(start), approvals=approvals, group=group
    )


# --- which band -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        ("0.01", band(None, 1, "Support")),
        ("199.99", band(None, 1, "Support")),
        ("200.00", band("200.00", 2, "Finance")),
        ("5000.00", band("1000.00", 3, "Finance")),
        (None, band("1000.00", 3, "Finance")),
    ],
)
def test_a_call_falls_in_the_band_with_the_highest_start_at_or_below_its_amount(amount, expected):
    bands = (band(None, 1, "Support"), band("200.00", 2, "Finance"), band("1000.00", 3, "Finance"))

    found = band_for(bands, None if amount is None else Decimal(amount))

    assert found == expected


def test_below_every_band_a_call_has_no_band_and_needs_one_supervisor():
    assert band_for((band("200.00", 2),), Decimal("100.00")) is None
    assert band_for((), Decimal("100.00")) is None


def test_the_admins_lines_read_and_write_back_the_same_bands():
    text = "2 of Finance from 200\n\n1 of Support\n3 from 1000.5"

    bands = bands_parse(text)

    assert bands == (band(None, 1, "Support"), band("200.00", 2, "Finance"), band("1000.50", 3))
    assert bands_text(bands) == "1 of Support\n2 of Finance from 200.00\n3 from 1000.50"
    assert bands_parse(bands_text(bands)) == bands


def test_a_line_that_does_not_read_is_named():
    with pytest.raises(ValueError, match=r"line 2 .*'two of Finance'"):
        bands_parse("1 of Support\ntwo of Finance")


# --- the policy over REST -------------------------------------------------------------------


@pytest.fixture
def groups(demo):
    """Finance (sam, fay) and Support (sue, tom), all supervisors of the demo shop."""
    for name in ("fay", "tom", "ned"):
        factories.user_create(name, merchant=demo, role=Role.SUPERVISOR)
    approver_group_set(merchant=demo, name="Finance", usernames=["sam", "fay"])
    approver_group_set(merchant=demo, name="Support", usernames=["sue", "tom"])
    return demo


@pytest.fixture
def operator(demo, api):
    factories.user_create("opal", merchant=demo, role=Role.OPERATOR)
    return api("opal")


def put(client, body):
    """A PUT of the refund policy: every rule named (null: never), as the API asks."""
    rules = {
        "amount_field": "amount",
        "auto_approve_up_to": None,
        "two_approvers_from": None,
        "escalate_after_seconds": None,
    }
    return client.put(
        "/api/v1/policies/issue_refund",
        json.dumps(rules | body),
        content_type="application/json",
    )


BANDS_BODY = [
    {"from": "200.00", "approvals": 2, "group": "Finance"},
    {"approvals": 1, "group": "Support"},
]


@pytest.mark.django_db
def test_an_operator_sets_bands_and_reads_them_back_lowest_first(groups, operator):
    response = put(operator, {"amount_field": "amount", "approver_bands": BANDS_BODY})

    assert response.status_code == 200, response.json()
    assert response.json()["approver_bands"] == [
        {"from": None, "approvals": 1, "group": "Support"},
        {"from": "200.00", "approvals": 2, "group": "Finance"},
    ]
    assert response.json()["two_approvers_from"] is None
    read = operator.get("/api/v1/policies/issue_refund").json()
    assert read["approver_bands"] == response.json()["approver_bands"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"approver_bands": [{"approvals": 2, "group": "Legal"}]}, "'Legal' is not an approver"),
        (
            {"two_approvers_from": "100.00", "approver_bands": BANDS_BODY},
            "either two_approvers_from or approver_bands",
        ),
        (
            {"approver_bands": [{"from": "5.00", "approvals": 1}, {"from": "5", "approvals": 2}]},
            "two bands start at one amount",
        ),
        (
            {"auto_approve_up_to": "50.00", "approver_bands": [{"from": "50.00", "approvals": 2}]},
            "above auto_approve_up_to (50.00)",
        ),
    ],
)
def test_bands_that_do_not_fit_are_refused_with_the_field_named(groups, operator, body, message):
    response = put(operator, {"amount_field": "amount", **body})

    problem = assert_problem(response, 400, "validation_error")
    assert any(
        error["field"] == "approver_bands" and message in error["message"]
        for error in problem["errors"]
    ), problem
    assert not ApprovalPolicy.objects.filter(current__isnull=False).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("approvals", [0, 21, "2", None])
def test_a_band_asks_for_one_to_twenty_people_as_a_whole_number(groups, operator, approvals):
    response = put(
        operator, {"amount_field": "amount", "approver_bands": [{"approvals": approvals}]}
    )

    assert_problem(response, 400, "validation_error")


# --- deciding under "2 of Finance from 200.00, 1 of Support" ---------------------------------


@pytest.fixture
def banded(groups):
    policy_set(groups, approver_bands=FINANCE_AND_SUPPORT)
    big_order(groups)
    return groups


def decide(client, approval, decision="approve", **body):
    return client.post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": decision, **seen(approval, decision, body)},
        format="json",
    )


@pytest.mark.django_db
def test_a_large_refund_needs_two_of_finance_and_nobody_else_counts(banded, api):
    run = refund_run(banded, "300", order="ORD-9001")
    approval = approval_of(run)
    assert (approval.required_approvals, approval.required_group) == (2, "Finance")

    # when a Support member, a service key and then Finance's sam and fay approve
    by_sue = decide(api("sue"), approval)
    by_key = decide(api(None), approval)
    by_sam = decide(api("sam"), approval)
    by_fay = decide(api("fay"), approval)

    # then only Finance counted, and the second of Finance approved it
    assert "Finance group" in assert_problem(by_sue, 403, "permission_denied")["detail"]
    assert "service key" in assert_problem(by_key, 403, "permission_denied")["detail"]
    assert by_sam.status_code == 200 and by_sam.json()["approval"]["status"] == "PENDING_APPROVAL"
    assert by_fay.status_code == 200, by_fay.json()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED_EXECUTING
    voters = ApprovalVote.objects.filter(approval=approval, args_digest=approval.args_digest)
    assert sorted(vote.user.username for vote in voters) == ["fay", "sam"]


@pytest.mark.django_db
def test_a_small_refund_needs_one_of_support(banded, api):
    run = refund_run(banded, "20")
    approval = approval_of(run)

    refused = decide(api("sam"), approval)
    approved = decide(api("tom"), approval)

    assert_problem(refused, 403, "permission_denied")
    assert approved.status_code == 200
    assert approved.json()["approval"]["status"] in {"APPROVED_EXECUTING", "EXECUTED"}


@pytest.mark.django_db
def test_a_revision_into_another_band_needs_that_bands_people(banded, api):
    # given a large refund that Finance's sam revises down into Support's band
    run = refund_run(banded, "300", order="ORD-9001")
    approval = approval_of(run)

    # when sam (Finance, not Support) revises it to 50, then Support's sue does
    by_sam = decide(
        api("sam"),
        approval,
        "revise",
        tool_args={"order_id": "ORD-9001", "amount": 50, "reason": "partly"},
    )
    by_sue = decide(
        api("sue"),
        approval,
        "revise",
        tool_args={"order_id": "ORD-9001", "amount": 50, "reason": "partly"},
    )

    # then sam's revision is refused: he may not approve what it would put on the table
    assert_problem(by_sam, 403, "permission_denied")
    assert by_sue.status_code == 200, by_sue.json()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED_EXECUTING
    assert (approval.approved_args["amount"], approval.required_group) == ("50.00", "Support")


@pytest.mark.django_db
def test_the_supervisor_who_started_the_run_may_reject_it_but_never_approve_it(banded, api):
    # given a run that sue, a supervisor, started herself
    sue = User.objects.get(username="sue")
    factories.order_create(merchant=banded, customer=sue, number="ORD-7001", total="80.00")
    run = factories.run_queue(
        customer=sue, merchant=banded, message="I want a refund for ORD-7001 amount 20"
    )
    worker.tick()
    approval = approval_of(run)

    # when she approves, revises, then rejects
    approved = decide(api("sue"), approval)
    revised = decide(
        api("sue"),
        approval,
        "revise",
        tool_args={"order_id": "ORD-7001", "amount": 5, "reason": "less"},
    )
    rejected = decide(api("sue"), approval, "reject", reason="changed my mind")

    # then only the rejection is hers to give
    assert "You started this run" in assert_problem(approved, 403, "permission_denied")["detail"]
    assert_problem(revised, 403, "permission_denied")
    assert rejected.status_code == 200
    run.refresh_from_db()
    assert approval_of(run).status == ApprovalStatus.REJECTED


@pytest.mark.django_db
def test_the_call_page_says_whose_approvals_it_needs_and_offers_no_approve_to_others(banded):
    run = refund_run(banded, "300", order="ORD-9001")
    approval = approval_of(run)
    assert run.status == RunStatus.WAITING_APPROVAL

    as_sue = signed_in(User.objects.get(username="sue")).get(
        f"/portal/approvals/{approval.interrupt_id}/"
    )
    as_sam = signed_in(User.objects.get(username="sam")).get(
        f"/portal/approvals/{approval.interrupt_id}/"
    )

    page = as_sue.content.decode()
    assert "Needs 2 approvals from the <strong>Finance</strong> group" in page
    assert "Only members of the Finance group approve this call." in page
    assert 'value="approve"' not in page
    assert 'value="approve"' in as_sam.content.decode()
    assert "2 of the Finance group from 200.00" in page


@pytest.mark.django_db
def test_the_admin_writes_bands_from_lines_and_names_a_line_it_cannot_read(groups):
    opal = factories.user_create("opal", merchant=groups, role=Role.OPERATOR)
    client = signed_in(opal)
    rules = {"merchant": groups.pk, "tool_name": "issue_refund", "amount_field": "amount"}

    bad = client.post(
        "/admin/approvals/approvalpolicy/add/", {**rules, "approver_bands": "2 of Finance from x"}
    )
    good = client.post(
        "/admin/approvals/approvalpolicy/add/",
        {**rules, "approver_bands": "2 of Finance from 200\n1 of Support"},
    )

    assert "line 1 does not read" in bad.content.decode()
    assert good.status_code == 302, good.context["adminform"].form.errors
    policy = ApprovalPolicy.objects.get(merchant=groups)
    assert policy.current.approver_bands == [
        {"from": None, "approvals": 1, "group": "Support"},
        {"from": "200.00", "approvals": 2, "group": "Finance"},
    ]
    listing = client.get("/admin/approvals/approvalpolicy/").content.decode()
    assert "1 of Support; 2 of Finance from 200.00" in listing


# --- the emails' links ------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_those_whose_approval_counts_are_emailed_an_approve_link(banded):
    # when a refund of 300.00, Finance's to approve, pauses
    approval = approval_of(refund_run(banded, "300", order="ORD-9001"))

    # then sam (Finance) may approve from his email; sue (Support) may only reject from hers
    assert set(links_in_email(approval, "sam")) == {"approve", "reject"}
    assert set(links_in_email(approval, "sue")) == {"reject"}
    body = Delivery.objects.get(recipient="sue@example.com").payload["body"]
    assert "This call needs approvals from the Finance group. You may reject it." in body


@pytest.mark.django_db
def test_an_approve_link_of_someone_who_left_the_group_says_so_and_decides_nothing(banded):
    # given sam's approve link, then sam leaves Finance
    approval = approval_of(refund_run(banded, "300", order="ORD-9001"))
    token = links_in_email(approval, "sam")["approve"]
    approver_group_set(merchant=banded, name="Finance", usernames=["fay"])

    # when he follows it, and posts it anyway
    page = follow(token)
    posted = confirm(token)

    # then both say why, and the call still waits with no approval
    assert "Only members of the Finance group approve this call." in page.content.decode()
    assert "Only members of the Finance group approve this call." in posted.content.decode()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert not ApprovalVote.objects.filter(approval=approval).exists()

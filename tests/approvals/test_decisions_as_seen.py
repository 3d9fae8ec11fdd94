"""Money moves only as the people deciding saw it (DESIGN 6.1.1): a revision is checked
again against the call's policy, an approval counts for the arguments its decider saw, four
eyes are two people, and amounts are plain decimals stored to the cent."""

from decimal import Decimal

import pytest

from approvals.models import Approval, ApprovalStatus, ApprovalVote, Refund, args_digest
from runs import worker
from runs.models import AgentRun, RunStatus
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.pages import signed_in
from tests.threads import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def decide(client, approval, decision="approve", **body):
    return client.post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": decision, **body},
        format="json",
    )


def revision(amount: str, order: str = "ORD-9001") -> dict:
    return {"tool_args": {"order_id": order, "amount": amount, "reason": "as agreed"}}


def shown_digest(client, approval) -> str:
    """The digest a supervisor's screen shows for the call, read as an integration reads it."""
    return client.get(f"/api/v1/approvals/{approval.interrupt_id}").json()["args_digest"]


@pytest.fixture
def small_refund(demo):
    """A 5.00 refund on a large order, under a policy that wants two people from 40.00."""
    policy_set(demo, two_approvers_from="40.00")
    big_order(demo, total="9000.00")
    run = refund_run(demo, "5", order="ORD-9001")
    assert run.status == RunStatus.WAITING_APPROVAL
    approval = approval_of(run)
    assert approval.required_approvals == 1
    return run, approval


# --- 1. a revision is checked again ------------------------------------------------------------


def test_a_revision_over_the_four_eyes_threshold_waits_for_a_second_person(small_refund, api):
    run, approval = small_refund

    # when sam revises 5.00 to 60.00
    response = decide(api("sam"), approval, "revise", **revision("60"))

    # then the call needs two approvals now, has sam's, and nothing is paid
    assert response.status_code == 200, response.json()
    body = response.json()["approval"]
    assert body["status"] == "PENDING_APPROVAL"
    assert body["required_approvals"] == 2
    assert [given["by"] for given in body["approvals_given"]] == ["sam"]
    assert body["approved_args"]["amount"] == "60.00"
    worker.tick()
    assert Refund.objects.count() == 0
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL

    # when sue approves what she sees, 60.00
    sue = api("sue")
    done = decide(sue, approval, args_digest=shown_digest(sue, approval))

    # then 60.00 is paid once, approved by both
    assert done.status_code == 200, done.json()
    assert done.json()["approval"]["status"] == "APPROVED_EXECUTING"
    worker.tick()
    assert [refund.amount for refund in Refund.objects.all()] == [Decimal("60.00")]
    approval.refresh_from_db()
    assert approval.executed_args["amount"] == "60.00"
    assert {vote.user.username for vote in approval.current_votes} == {"sam", "sue"}


def test_a_revision_to_3000_through_the_page_waits_for_a_second_person(small_refund):
    _run, approval = small_refund
    client = signed_in("sam")
    page = f"/portal/approvals/{approval.interrupt_id}/"

    # when sam types 3000 in the amount and approves his revision
    client.post(
        page,
        {
            "action": "revise",
            "arg-order_id": "ORD-9001",
            "arg-amount": "3000",
            "arg-reason": "customer request",
            "args_digest": approval.digest_on_the_table,
        },
    )

    # then it waits for a second person; nothing is paid
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert approval.required_approvals == 2
    assert approval.approved_args["amount"] == "3000.00"
    worker.tick()
    assert Refund.objects.count() == 0


def test_a_revision_under_the_threshold_needs_only_the_reviser(small_refund, api):
    _run, approval = small_refund
    decide(api("sam"), approval, "revise", **revision("60"))

    # when sue revises the 60.00 down to 30.00
    response = decide(api("sue"), approval, "revise", **revision("30"))

    # then 30.00 needs one person, and sue's revision is that approval
    assert response.status_code == 200, response.json()
    assert response.json()["approval"]["status"] == "APPROVED_EXECUTING"
    assert response.json()["approval"]["required_approvals"] == 1
    worker.tick()
    assert [refund.amount for refund in Refund.objects.all()] == [Decimal("30.00")]


def test_a_revision_under_the_auto_approval_limit_is_still_a_persons_decision(demo, api):
    # given a 20.00 call under a policy that approves up to 10.00 on its own
    policy_set(demo, auto_approve_up_to="10.00", two_approvers_from="40.00")
    run = refund_run(demo, "20")
    approval = approval_of(run)
    assert approval.status == ApprovalStatus.PENDING_APPROVAL

    # when sam revises it to 5.00
    response = decide(api("sam"), approval, "revise", **revision("5", order="ORD-1003"))

    # then it is sam's approval, not the policy's
    assert response.status_code == 200, response.json()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED_EXECUTING
    assert approval.decided_by_policy is False
    assert approval.decided_by.username == "sam"
    assert response.json()["approval"]["decided_by"] == "sam"


# --- 2. an approval lands only on what its decider saw ---------------------------------------


def test_an_approve_of_arguments_a_colleague_changed_is_refused(demo, api):
    # given a 45.00 call that needs two people, on sue's screen
    policy_set(demo, two_approvers_from="40.00")
    big_order(demo, total="9000.00")
    approval = approval_of(refund_run(demo, "45", order="ORD-9001"))
    sue = api("sue")
    seen_by_sue = shown_digest(sue, approval)

    # when sam revises it to 4000.00, and sue then presses approve on what she saw
    assert decide(api("sam"), approval, "revise", **revision("4000")).status_code == 200
    response = decide(sue, approval, args_digest=seen_by_sue)

    # then 409 arguments_changed with what is on the table now; her approval is not recorded
    assert response.status_code == 409
    problem = response.json()
    assert problem["code"] == "arguments_changed"
    assert problem["tool_args"]["amount"] == "4000.00"
    approval.refresh_from_db()
    assert problem["args_digest"] == approval.digest_on_the_table
    assert not ApprovalVote.objects.filter(approval=approval, user__username="sue").exists()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    worker.tick()
    assert Refund.objects.count() == 0


@pytest.mark.parametrize("after", ["a revision", "a colleague's approval"])
def test_an_approve_over_the_api_must_name_what_it_saw_once_someone_acted(demo, api, after):
    policy_set(demo, two_approvers_from="40.00")
    big_order(demo, total="9000.00")
    approval = approval_of(refund_run(demo, "45", order="ORD-9001"))
    if after == "a revision":
        decide(api("sam"), approval, "revise", **revision("50"))
    else:
        decide(api("sam"), approval, args_digest=approval.digest_on_the_table)

    # when sue approves without saying which arguments she saw
    response = decide(api("sue"), approval)

    # then she is told to, and nothing is recorded
    assert response.status_code == 409
    assert response.json()["code"] == "arguments_changed"
    assert ApprovalVote.objects.filter(approval=approval).count() == 1


def test_a_first_approve_of_what_the_model_proposed_needs_no_digest(demo, api):
    approval = approval_of(refund_run(demo, "20"))

    response = decide(api("sam"), approval)

    assert response.status_code == 200, response.json()
    assert response.json()["approval"]["status"] == "APPROVED_EXECUTING"


def test_a_pending_call_shows_the_digest_of_the_arguments_on_the_table(demo, api):
    approval = approval_of(refund_run(demo, "20"))
    sam = api("sam")

    # a call nobody acted on yet shows the digest of the model's arguments
    assert shown_digest(sam, approval) == args_digest(approval.proposed_args)
    # a bad digest is a field error, not a stale one
    bad = decide(sam, approval, args_digest="XYZ")
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["field"] == "args_digest"
    # a reject never needs one
    assert decide(sam, approval, "reject", reason="not eligible").status_code == 200
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.REJECTED


def test_an_approve_racing_a_colleagues_revision_never_pays_what_nobody_approved(demo, api):
    big_order(demo, total="90000.00")
    sam, sue = api("sam"), api("sue")
    outcomes = []
    for _ in range(30):
        # given a 45.00 call on sue's screen
        approval = approval_of(refund_run(demo, "45", order="ORD-9001"))
        seen_by_sue = approval.digest_on_the_table
        paid_before = Refund.objects.count()

        # when sue approves what she saw while sam revises it to 60.00
        approve, revise = in_threads(
            [
                lambda call=approval, seen=seen_by_sue: decide(sue, call, args_digest=seen),
                lambda call=approval: decide(sam, call, "revise", **revision("60")),
            ]
        )
        worker.tick()

        # then exactly one decision counts, and what executed is what its decider saw
        approval.refresh_from_db()
        assert sorted([approve.status_code, revise.status_code]) == [200, 409]
        assert approval.status == ApprovalStatus.EXECUTED
        decider = approval.decided_by.username
        assert (decider, approval.executed_args["amount"]) in {("sue", "45.00"), ("sam", "60.00")}
        assert ApprovalVote.objects.get(approval=approval).args_digest == approval.args_digest
        assert Refund.objects.count() - paid_before == 1
        outcomes.append(decider)
    assert len(outcomes) == 30


# --- 6. four eyes are two people ---------------------------------------------------------------


def test_two_service_keys_are_not_four_eyes(demo, api):
    policy_set(demo, two_approvers_from="40.00")
    big_order(demo, total="9000.00")
    approval = approval_of(refund_run(demo, "500", order="ORD-9001"))
    first_key, second_key = api(), api()
    digest = approval.digest_on_the_table

    # when one service key approves, then another key of the same shop
    first = decide(first_key, approval, args_digest=digest)
    second = decide(second_key, approval, args_digest=digest)

    # then the first counts as one vote and the second is refused: nothing is paid
    assert first.status_code == 200, first.json()
    assert first.json()["approval"]["status"] == "PENDING_APPROVAL"
    assert second.status_code == 409
    assert second.json()["code"] == "same_approver"
    worker.tick()
    assert Refund.objects.count() == 0

    # when a supervisor gives the second approval
    done = decide(api("sam"), approval, args_digest=digest)

    # then it executes once
    assert done.status_code == 200, done.json()
    worker.tick()
    assert Refund.objects.count() == 1


def test_a_service_key_never_completes_four_eyes(demo, api):
    policy_set(demo, two_approvers_from="40.00")
    big_order(demo, total="9000.00")
    approval = approval_of(refund_run(demo, "500", order="ORD-9001"))
    digest = approval.digest_on_the_table
    assert decide(api("sam"), approval, args_digest=digest).status_code == 200

    # when a service key would give the second approval
    response = decide(api(), approval, args_digest=digest)

    # then 403: the last approval must be a person's; nothing is recorded or paid
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert ApprovalVote.objects.filter(approval=approval).count() == 1
    worker.tick()
    assert Refund.objects.count() == 0


# --- 7. amounts are plain decimals, stored to the cent -----------------------------------------


@pytest.mark.parametrize(
    "amount", ["1_0", "\u0661\u0660", "\uff11\uff10", "+5", " 5 ", "1E+2", "5.0000", "-5", ""]
)
def test_an_amount_that_is_not_plainly_written_is_refused(demo, api, amount):
    approval = approval_of(refund_run(demo, "20"))

    response = decide(api("sam"), approval, "revise", **revision(amount, order="ORD-1003"))

    assert response.status_code == 400
    problem = response.json()
    assert problem["code"] == "validation_error"
    assert [error["field"] for error in problem["errors"]] == ["tool_args.amount"]
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert not ApprovalVote.objects.filter(approval=approval).exists()


@pytest.mark.parametrize(("amount", "stored"), [("5", "5.00"), ("5.5", "5.50"), (7, "7.00")])
def test_an_amount_is_stored_to_the_cent(demo, api, amount, stored):
    approval = approval_of(refund_run(demo, "20"))

    response = decide(api("sam"), approval, "revise", **revision(amount, order="ORD-1003"))
    worker.tick()

    assert response.status_code == 200, response.json()
    approval = Approval.objects.get(pk=approval.pk)
    assert approval.approved_args["amount"] == stored
    assert approval.executed_args["amount"] == stored
    assert Refund.objects.get().amount == Decimal(stored)


# --- 5. a revision names only the customer's own orders ----------------------------------------


def test_a_revision_to_another_customers_order_is_refused_over_the_api(demo, api):
    # given alice's 20.00 refund for her ORD-1003
    approval = approval_of(refund_run(demo, "20"))

    # when a supervisor points it at bob's ORD-2001
    response = decide(api("sam"), approval, "revise", **revision("20", order="ORD-2001"))

    # then 400 beside the order, nothing recorded, nothing paid
    assert response.status_code == 400
    problem = response.json()
    assert problem["code"] == "validation_error"
    assert [error["field"] for error in problem["errors"]] == ["tool_args.order_id"]
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING_APPROVAL
    assert not ApprovalVote.objects.filter(approval=approval).exists()
    worker.tick()
    assert Refund.objects.count() == 0

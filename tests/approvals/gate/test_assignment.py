"""Who is on a call: assigned to a supervisor or a group, unassigned, or claimed; over the
API, from the admin, and never a restriction on who decides."""

import pytest
from django.contrib.auth.models import User

from agentportal import errors
from agentportal.models import Role
from agentportal.selectors import principal_for_user
from approvals.gate import assignment
from approvals.models import Approval, ApprovalStatus, ApproverGroup, Refund
from runs import worker
from runs.models import RunEvent
from runs.timeline import run_timeline
from tests import factories
from tests.approvals.policy_helpers import seen
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import signed_in
from tests.threads import in_threads


def assign(client, approval: Approval, **body):
    return client.post(f"/api/v1/approvals/{approval.interrupt_id}/assign", body, format="json")


def finance(demo, *members: str) -> ApproverGroup:
    group = ApproverGroup.objects.create(merchant=demo, name="Finance")
    group.members.set(User.objects.filter(username__in=members))
    return group


@pytest.mark.django_db
def test_a_supervisor_assigns_a_call_to_a_colleague_and_the_timeline_says_so(demo, api):
    # given
    approval = refund_run_waiting().approval

    # when sue assigns it to sam
    response = assign(api("sue"), approval, user="sam")

    # then
    assert response.status_code == 200, response.json()
    assert response.json()["assigned_to"]["kind"] == "person"
    assert response.json()["assigned_to"]["name"] == "sam"
    approval.refresh_from_db()
    assert approval.assigned_user.username == "sam"
    event = RunEvent.objects.get(run=approval.run, type="approval.assigned")
    # the run's events are the customer's to read too: staff are not named in them
    assert "sam" not in str(event.data) and "sue" not in str(event.data)
    sentences = [entry["sentence"] for entry in run_timeline(approval.run)]
    assert "Assigned to a supervisor" in sentences


@pytest.mark.django_db
def test_a_call_goes_to_a_group_and_back_to_nobody(demo, api):
    # given
    approval = refund_run_waiting().approval
    finance(demo, "sam")

    # when
    to_group = assign(api("sue"), approval, group="Finance")
    unassigned = assign(api("sue"), approval)

    # then
    assert to_group.status_code == 200, to_group.json()
    assert to_group.json()["assigned_to"]["kind"] == "group"
    assert to_group.json()["assigned_to"]["name"] == "Finance"
    assert unassigned.status_code == 200
    assert unassigned.json()["assigned_to"] is None
    sentences = [entry["sentence"] for entry in run_timeline(approval.run)]
    assert "Assigned to the group Finance" in sentences
    assert "Unassigned: back in everyone's inbox" in sentences


@pytest.mark.django_db
def test_assigning_to_whom_it_is_assigned_already_changes_nothing(demo, api):
    approval = refund_run_waiting().approval

    first, again = (
        assign(api("sue"), approval, user="sam"),
        assign(api("sue"), approval, user="sam"),
    )

    assert first.status_code == again.status_code == 200
    assert first.json()["assigned_to"] == again.json()["assigned_to"]
    assert RunEvent.objects.filter(run=approval.run, type="approval.assigned").count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user": "nobody-here"}, "user"),
        ({"user": "alice"}, "user"),  # a customer of the shop
        ({"user": "oscar"}, "user"),  # another shop's supervisor
        ({"group": "Finance"}, "group"),  # no such group in this shop
        ({"user": "sam", "group": "Finance"}, "group"),
        ({"claim": True, "user": "sam"}, "claim"),
        ({"user": 7}, "user"),
        ({"to": "sam"}, "to"),
    ],
)
def test_a_bad_assignee_is_a_problem_naming_its_field(demo, api, body, field):
    approval = refund_run_waiting().approval

    response = assign(api("sue"), approval, **body)

    assert response.status_code == 400, response.json()
    assert response.json()["code"] == "validation_error"
    assert field in {error["field"] for error in response.json()["errors"]}
    assert Approval.objects.get(pk=approval.pk).assigned_at is None


@pytest.mark.django_db
def test_who_may_assign_and_claim(demo, api):
    approval = refund_run_waiting().approval
    other = factories.merchant_create()
    stranger = factories.user_create(merchant=other, role=Role.SUPERVISOR)

    customer = assign(api("alice"), approval, user="sam")
    elsewhere = assign(api(stranger.username, merchant=other.slug), approval, user="sam")
    service_claim = assign(api(None), approval, claim=True)
    service_assign = assign(api(None), approval, user="sam")

    assert (customer.status_code, customer.json()["code"]) == (403, "permission_denied")
    assert elsewhere.status_code == 404
    assert (service_claim.status_code, service_claim.json()["code"]) == (403, "permission_denied")
    assert service_assign.status_code == 200, service_assign.json()


@pytest.mark.django_db
def test_a_claim_is_refused_once_a_colleague_has_the_call(demo, api):
    # given sam claimed it
    approval = refund_run_waiting().approval
    assert assign(api("sam"), approval, claim=True).status_code == 200

    # when sue claims it, and sam claims it again
    sue = assign(api("sue"), approval, claim=True)
    sam_again = assign(api("sam"), approval, claim=True)

    # then sue is told sam has it; sam's second claim changes nothing
    assert (sue.status_code, sue.json()["code"]) == (409, "invalid_transition")
    assert "sam took this call" in sue.json()["detail"]
    assert sue.json()["assigned_to"] == "sam"
    assert sam_again.status_code == 200
    assert Approval.objects.get(pk=approval.pk).assigned_user.username == "sam"


@pytest.mark.django_db
def test_an_assigned_call_is_still_anyones_to_decide_and_a_decided_one_nobodys_to_take(demo, api):
    # given the call assigned to sam
    approval = refund_run_waiting().approval
    assign(api("sue"), approval, user="sam")

    # when sue approves it herself, then someone assigns it
    decided = api("sue").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        seen(approval, "approve", {"decision": "approve"}),
        format="json",
    )
    late = assign(api("sam"), approval, claim=True)
    worker.tick()

    # then her approval stood, and the assignment came too late
    assert decided.status_code == 200, decided.json()
    assert (late.status_code, late.json()["code"]) == (409, "already_decided")
    assert Refund.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_eight_supervisors_claiming_at_once_leave_it_with_one(demo):
    # given eight supervisors of the shop
    approval = refund_run_waiting().approval
    people = [factories.user_create(merchant=demo, role=Role.SUPERVISOR) for _ in range(8)]

    def claim(user):
        principal = principal_for_user(user=user, merchant=demo)
        try:
            assignment.approval_assign(
                approval=approval, principal=principal, assignee=assignment.NOBODY, claim=True
            )
        except errors.InvalidTransition:
            return False
        return True

    # when
    claimed = in_threads([lambda user=user: claim(user) for user in people])

    # then one has it, the others were told
    assert sorted(claimed) == [False] * 7 + [True]
    winner = people[claimed.index(True)]
    assert Approval.objects.get(pk=approval.pk).assigned_user == winner
    assert RunEvent.objects.filter(run=approval.run, type="approval.assigned").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_assignment_racing_a_decision_never_stops_the_decision(demo, api):
    # given
    approval = refund_run_waiting().approval
    sam, sue = api("sam"), api("sue")
    body = seen(approval, "approve", {"decision": "approve"})

    # when sue approves while sam assigns it to himself
    def approve():
        url = f"/api/v1/approvals/{approval.interrupt_id}/decision"
        return sue.post(url, body, format="json").status_code

    def take():
        return assign(sam, approval, user="sam").status_code

    decided, assigned = in_threads([approve, take])
    worker.tick()

    # then the decision stood and was carried out once; the assignment came first or not at all
    assert decided == 200
    assert assigned in (200, 409)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXECUTED
    assert Refund.objects.count() == 1


@pytest.mark.django_db
def test_the_admin_assigns_the_selected_calls_to_a_group_or_a_person(demo):
    # given two calls and a group
    first = refund_run_waiting().approval
    second = refund_run_waiting("refund ORD-2001 amount 9", customer="bob").approval
    finance(demo, "sam", "sue")
    sue = signed_in("sue")

    def act(name, *approvals):
        return sue.post(
            "/admin/approvals/approval/",
            {
                "action": "assign_selected",
                "_selected_action": [approval.pk for approval in approvals],
                "assignee": name,
            },
            follow=True,
        ).content.decode()

    # when
    to_group = act("Finance", first, second)
    to_nobody_known = act("not-a-person", first)

    # then
    assert f"Approval {first.interrupt_id}: assigned to Finance." in to_group
    assert {a.assigned_name for a in Approval.objects.all()} == {"Finance"}
    assert "does not supervise" in to_nobody_known
    assert Approval.objects.get(pk=first.pk).assigned_name == "Finance"


@pytest.mark.django_db
def test_a_claim_of_a_groups_call_names_the_group_and_another_shop_finds_nothing(demo, api):
    # given the call assigned to Finance
    approval = refund_run_waiting().approval
    finance(demo, "sue")
    assert assign(api("sue"), approval, group="Finance").status_code == 200
    oscar = User.objects.get(username="oscar")
    elsewhere = principal_for_user(user=oscar, merchant=oscar.memberships.get().merchant)

    # when sam claims it, and another shop's supervisor reaches the service directly
    claimed = assign(api("sam"), approval, claim=True)
    with pytest.raises(errors.NotFound):
        assignment.approval_assign(
            approval=approval, principal=elsewhere, assignee=assignment.NOBODY, claim=True
        )

    # then
    assert claimed.status_code == 409
    assert claimed.json()["detail"].startswith("The group Finance took this call")
    assert Approval.objects.get(pk=approval.pk).assigned_name == "Finance"


@pytest.mark.django_db
def test_operators_set_a_groups_members_and_supervisors_list_them(demo, api):
    # given an operator of the shop
    factories.user_create("olivia", merchant=demo, role=Role.OPERATOR)

    # when she makes Finance of sam and sue, then of sue alone
    made = api("olivia").put("/api/v1/groups/Finance", {"members": ["sam", "sue"]}, format="json")
    changed = api("olivia").put("/api/v1/groups/Finance", {"members": ["sue"]}, format="json")
    listed = api("sam").get("/api/v1/groups")

    # then
    assert made.status_code == 200, made.json()
    assert made.json() == {"name": "Finance", "members": ["sam", "sue"]}
    assert changed.json() == {"name": "Finance", "members": ["sue"]}
    assert listed.json() == {"results": [{"name": "Finance", "members": ["sue"]}]}
    assert ApproverGroup.objects.count() == 1


@pytest.mark.django_db
def test_only_the_shops_supervisors_are_members_and_only_operators_set_them(demo, api):
    factories.user_create("olivia", merchant=demo, role=Role.OPERATOR)

    strangers = api("olivia").put(
        "/api/v1/groups/Finance", {"members": ["sam", "alice", "oscar"]}, format="json"
    )
    by_supervisor = api("sam").put("/api/v1/groups/Finance", {"members": ["sam"]}, format="json")
    by_service = api(None).put("/api/v1/groups/Finance", {"members": ["sam"]}, format="json")
    too_long = api(None).put(f"/api/v1/groups/{'x' * 65}", {"members": []}, format="json")

    assert (strangers.status_code, strangers.json()["code"]) == (400, "validation_error")
    assert "alice, oscar are not" in strangers.json()["detail"]
    assert by_supervisor.status_code == 403
    assert by_service.status_code == 200
    assert too_long.status_code == 404
    assert list(ApproverGroup.objects.values_list("name", flat=True)) == ["Finance"]


@pytest.mark.django_db(transaction=True)
def test_two_writers_of_one_new_group_write_it_once(demo):
    names = [["sam"], ["sue"], ["sam", "sue"], []] * 2

    in_threads(
        [
            lambda members=members: assignment.approver_group_set(
                merchant=demo, name="Finance", usernames=members
            )
            for members in names
        ]
    )

    assert ApproverGroup.objects.filter(name="Finance").count() == 1


@pytest.mark.django_db
def test_a_deleted_group_leaves_its_calls_unassigned(demo, api):
    approval = refund_run_waiting().approval
    group = finance(demo, "sam")
    assign(api("sue"), approval, group="Finance")

    group.delete()

    shown = api("sue").get(f"/api/v1/approvals/{approval.interrupt_id}").json()
    assert shown["assigned_to"] is None
    assert Approval.objects.get(pk=approval.pk).is_assigned is False

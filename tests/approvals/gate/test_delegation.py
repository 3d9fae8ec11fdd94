"""A supervisor away from the shop: their absence names a stand-in, who gets the calls
assigned to them and their emails about new and escalated calls meanwhile, told why."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.models import Membership, Role
from approvals import tasks
from approvals.gate import delegation
from approvals.models import Absence, Approval, Delivery, Transport
from approvals.stand_ins import stand_in_for
from runs.models import RunEvent
from runs.timeline import run_timeline
from tests import factories
from tests.approvals.policy_helpers import approval_of, policy_set, refund_run
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import signed_in
from tests.threads import in_threads

ABSENCES = "/api/v1/absences"


def away(demo, username: str, delegate: str, days: int = 3) -> Absence:
    now = timezone.now()
    return delegation.absence_set(
        merchant=demo,
        user=User.objects.get(username=username),
        delegate=User.objects.get(username=delegate),
        starts_at=now - timedelta(hours=1),
        ends_at=now + timedelta(days=days),
    )


def in_days(days: float) -> str:
    return (timezone.now() + timedelta(days=days)).isoformat()


@pytest.mark.django_db
def test_a_supervisor_sets_lists_and_ends_their_absence_over_the_api(demo, api):
    sam = api("sam")

    created = sam.post(ABSENCES, {"delegate": "sue", "ends_at": in_days(2)}, format="json")
    listed = sam.get(ABSENCES).json()["results"]
    seen_by_sue = api("sue").get(ABSENCES).json()["results"]
    ended_by_sue = api("sue").delete(f"{ABSENCES}/{created.json()['id']}")
    ended = sam.delete(f"{ABSENCES}/{created.json()['id']}")

    assert created.status_code == 201, created.json()
    assert (created.json()["user"], created.json()["delegate"]) == ("sam", "sue")
    assert [absence["id"] for absence in listed] == [created.json()["id"]]
    assert seen_by_sue == []
    assert ended_by_sue.status_code == 404
    assert ended.status_code == 204
    assert sam.get(ABSENCES).json()["results"] == []
    assert stand_in_for(merchant=demo, user=User.objects.get(username="sam")).user.username == (
        "sam"
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"delegate": "sam", "ends_at": in_days(1)}, "delegate"),  # oneself
        ({"delegate": "alice", "ends_at": in_days(1)}, "delegate"),  # a customer
        ({"delegate": "oscar", "ends_at": in_days(1)}, "delegate"),  # another shop's
        ({"delegate": "sue", "ends_at": in_days(-1)}, "ends_at"),  # over already
        ({"delegate": "sue", "starts_at": in_days(2), "ends_at": in_days(1)}, "ends_at"),
        ({"delegate": "sue"}, "ends_at"),
        ({"delegate": "sue", "ends_at": "next week"}, "ends_at"),
    ],
)
def test_a_bad_absence_is_a_problem_naming_its_field(demo, api, body, field):
    response = api("sam").post(ABSENCES, body, format="json")

    assert response.status_code == 400, response.json()
    assert field in {error["field"] for error in response.json()["errors"]}
    assert not Absence.objects.exists()


@pytest.mark.django_db
def test_who_may_set_whose_absence(demo, api):
    body = {"delegate": "sue", "ends_at": in_days(1)}

    others = api("sam").post(ABSENCES, {**body, "user": "sue", "delegate": "sam"}, format="json")
    customer = api("alice").post(ABSENCES, body, format="json")
    service_unnamed = api(None).post(ABSENCES, body, format="json")
    service = api(None).post(ABSENCES, {**body, "user": "sam"}, format="json")

    assert (others.status_code, others.json()["code"]) == (403, "permission_denied")
    assert customer.status_code == 403
    assert service_unnamed.status_code == 400
    assert service.status_code == 201, service.json()
    assert list(Absence.objects.values_list("user__username", flat=True)) == ["sam"]


@pytest.mark.django_db
def test_an_overlapping_absence_is_refused(demo, api):
    away(demo, "sam", "sue", days=3)

    overlapping = api("sam").post(
        ABSENCES,
        {"delegate": "sue", "starts_at": in_days(2), "ends_at": in_days(5)},
        format="json",
    )
    later = api("sam").post(
        ABSENCES,
        {"delegate": "sue", "starts_at": in_days(4), "ends_at": in_days(5)},
        format="json",
    )

    assert overlapping.status_code == 400
    assert "away then already" in overlapping.json()["detail"]
    assert later.status_code == 201
    assert Absence.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_overlapping_absences_set_at_once_leave_one(demo):
    sam, sue = (User.objects.get(username=name) for name in ("sam", "sue"))
    now = timezone.now()

    def set_absence(days):
        try:
            delegation.absence_set(
                merchant=demo,
                user=sam,
                delegate=sue,
                starts_at=now,
                ends_at=now + timedelta(days=days),
            )
        except delegation.errors.InvalidInput:
            return False
        return True

    results = in_threads([lambda days=days: set_absence(days) for days in range(1, 7)])

    assert sorted(results) == [False] * 5 + [True]
    assert Absence.objects.count() == 1


@pytest.mark.django_db
def test_a_call_assigned_to_someone_away_goes_to_their_stand_in(demo, api):
    # given sam away, sue standing in
    approval = refund_run_waiting().approval
    away(demo, "sam", "sue")

    # when the call is assigned to sam
    response = api("sue").post(
        f"/api/v1/approvals/{approval.interrupt_id}/assign", {"user": "sam"}, format="json"
    )

    # then it is sue's, and the timeline says someone stands in
    assert response.status_code == 200, response.json()
    assert response.json()["assigned_to"]["name"] == "sue"
    assert RunEvent.objects.get(run=approval.run, type="approval.assigned").data["stands_in"]
    sentences = [entry["sentence"] for entry in run_timeline(approval.run)]
    assert "Assigned to a supervisor standing in for a colleague who is away" in sentences


@pytest.mark.django_db
def test_stand_ins_are_followed_while_away_and_only_to_people_of_the_shop(demo):
    # given sam away for sue, sue away for sid
    sid = factories.user_create("sid", merchant=demo, role=Role.SUPERVISOR)
    sam = User.objects.get(username="sam")
    away(demo, "sam", "sue")
    away(demo, "sue", "sid")

    # then sam's stand-in is sid, as long as sid supervises the shop
    assert stand_in_for(merchant=demo, user=sam).user == sid
    Membership.objects.filter(user=sid).update(active=False)
    assert stand_in_for(merchant=demo, user=sam).user.username == "sue"


@pytest.mark.django_db
def test_two_people_standing_in_for_each_other_end_the_chain(demo):
    away(demo, "sam", "sue")
    away(demo, "sue", "sam")

    sam = User.objects.get(username="sam")
    assert stand_in_for(merchant=demo, user=sam).user.username == "sue"


@pytest.mark.django_db
def test_someone_away_gets_no_email_about_a_new_call_and_their_stand_in_one(demo):
    # given sam away for sid, a supervisor too
    sid = factories.user_create("sid", merchant=demo, role=Role.SUPERVISOR)
    sid.email = "sid@example.com"
    sid.save()
    away(demo, "sam", "sid")

    # when a call waits
    approval = refund_run_waiting().approval

    # then sam gets nothing; sue and sid one each (sid's own, not a second for sam)
    recipients = sorted(
        delivery.recipient
        for delivery in Delivery.objects.filter(
            transport=Transport.EMAIL, event="approval.requested"
        )
        if approval.interrupt_id in delivery.payload["body"]
    )
    assert recipients == ["sid@example.com", "sue@example.com"]


@pytest.mark.django_db
def test_an_escalation_for_an_operator_away_goes_to_their_stand_in(demo):
    # given an operator away, sue standing in, and a call the policy escalates after 10 min
    olivia = factories.user_create("olivia", merchant=demo, role=Role.OPERATOR)
    olivia.email = "olivia@example.com"
    olivia.save()
    away(demo, "olivia", "sue")
    policy_set(demo, escalate_after_seconds=600)
    run = refund_run(demo, "20")
    approval = approval_of(run)

    # when it is escalated
    with time_machine.travel(approval.created_at + timedelta(seconds=601)):
        assert tasks.escalate(approval.interrupt_id)

    # then sue got it, told why, with links deciding as her
    [email] = Delivery.objects.filter(event="approval.escalated", transport=Transport.EMAIL)
    assert email.recipient == "sue@example.com"
    assert email.payload["body"].startswith("You get this for olivia, away until")
    assert "/portal/decide/" in email.payload["body"]
    assert Approval.objects.get(pk=approval.pk).escalated_at is not None


@pytest.mark.django_db
def test_the_admin_lists_the_shops_absences_and_edits_none(demo):
    away(demo, "sam", "sue")
    sue = signed_in("sue")

    listing = sue.get("/admin/approvals/absence/").content.decode()
    adding = sue.get("/admin/approvals/absence/add/")

    assert "sam" in listing and "sue" in listing
    assert adding.status_code == 403
    assert (
        signed_in("oscar").get("/admin/approvals/absence/").content.decode().count("field-user")
        == 0
    )

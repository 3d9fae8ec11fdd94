"""When a supervisor first looks at a call: recorded once, by the first person who
supervises its shop, on its page or over the API as a person."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User

from approvals.gate import attention
from approvals.models import Approval
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import signed_in
from tests.threads import in_threads


def first_seen(approval: Approval):
    return Approval.objects.get(pk=approval.pk).first_seen_at


@pytest.mark.django_db
def test_the_first_supervisor_to_open_the_page_is_the_first_look(demo):
    # given a call asked for at T
    with time_machine.travel("2026-12-01 09:00:00Z", tick=False) as clock:
        approval = refund_run_waiting().approval

        # when nobody looks for two minutes, then sam opens it, then sue a minute later
        clock.shift(timedelta(minutes=2))
        signed_in("sam").get(f"/portal/approvals/{approval.interrupt_id}/")
        clock.shift(timedelta(minutes=1))
        signed_in("sue").get(f"/portal/approvals/{approval.interrupt_id}/")

    # then the first look is sam's, two minutes after the pause
    assert first_seen(approval) - approval.created_at == timedelta(minutes=2)


@pytest.mark.django_db
def test_a_customer_or_a_service_key_reading_it_is_no_look(demo, api):
    # given
    approval = refund_run_waiting().approval

    # when the customer reads the call over the API, an integration too, and a stranger
    # tries its page
    assert api("alice").get(f"/api/v1/approvals/{approval.interrupt_id}").status_code == 403
    assert api(None).get(f"/api/v1/approvals/{approval.interrupt_id}").status_code == 200
    assert signed_in("oscar").get(f"/portal/approvals/{approval.interrupt_id}/").status_code == 404

    # then nobody has looked yet; sue reading it over the API is the first look
    assert first_seen(approval) is None
    assert api("sue").get(f"/api/v1/approvals/{approval.interrupt_id}").status_code == 200
    assert first_seen(approval) is not None


@pytest.mark.django_db(transaction=True)
def test_two_supervisors_opening_it_at_once_record_one_first_look(demo):
    # given
    approval = refund_run_waiting().approval
    people = [User.objects.get(username=name) for name in ("sam", "sue")] * 4

    # when eight opens race
    firsts = in_threads(
        [
            lambda user=user: attention.approval_seen_record(
                approval=Approval.objects.get(pk=approval.pk), user=user
            )
            for user in people
        ]
    )

    # then exactly one was the first look
    assert sorted(firsts) == [False] * 7 + [True]
    assert first_seen(approval) is not None

"""An approved refund whose run a worker parks (a broken snapshot) is closed with the run when
an operator fails it from the admin: the money is never paid later."""

import pytest

from approvals.models import Refund
from runs import worker
from runs.models import AgentRun, ErrorCode, RunStatus
from tests.approvals.refund_helpers import approved_refund_with_a_broken_snapshot
from tests.pages import signed_in

pytestmark = pytest.mark.django_db


def test_an_operator_failing_a_parked_refund_run_closes_its_approved_call(demo, api):
    # given: an approved refund whose run was parked
    run, _ = approved_refund_with_a_broken_snapshot(api)
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.PARKED

    # when: the operator (a superuser) fails it in the admin
    signed_in("admin").post(
        "/admin/runs/agentrun/",
        {"action": "fail_parked_selected", "_selected_action": [run.pk]},
        follow=True,
    )

    # then: it failed with INTERNAL_ERROR, its approved call was closed with it, nothing paid
    run = AgentRun.objects.get(pk=run.pk)
    assert (run.status, run.error_code) == (RunStatus.FAILED, ErrorCode.INTERNAL_ERROR)
    assert run.approvals.get().status == "CANCELLED"
    worker.tick()
    assert not Refund.objects.exists()

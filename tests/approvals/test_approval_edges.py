"""Edges of the approval flow the reviewers found: no snapshot, a broken one, a broken URL."""

from django.contrib.auth.models import User

from approvals.models import Approval, Delivery, Transport
from runs import services, worker
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.approvals.refund_helpers import approved_refund_with_a_broken_snapshot
from tests.pages import signed_in


def _run(demo, message):
    alice = User.objects.get(username="alice")
    run = factories.run_queue(customer=alice, merchant=demo, message=message)
    worker.tick()
    run.refresh_from_db()
    return run


def test_resume_of_a_run_that_never_paused_is_409_not_422(demo, api):
    finished = _run(demo, "What is the status of order ORD-1001?")
    queued = factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message="hello ORD-1002"
    )
    sam = api("sam")
    body = {"interrupt_id": "int-0", "decision": "approve"}

    done = sam.post(f"/api/v1/runs/{finished.pk}/resume", body, format="json")
    waiting = sam.post(f"/api/v1/runs/{queued.pk}/resume", body, format="json")

    assert (done.status_code, done.json()["code"]) == (409, "run_finished")
    assert (waiting.status_code, waiting.json()["code"]) == (409, "interrupt_mismatch")


def test_worker_parks_a_run_whose_snapshot_was_broken_and_nobody_fails_it(demo, api):
    # given: an approved refund whose snapshot is tampered before the worker runs it
    run, _ = approved_refund_with_a_broken_snapshot(api)

    # when: a worker takes it, and the sweeps run
    worker.tick()
    services.maintain()

    # then: left for an operator, PARKED, not re-claimed, not failed
    run.refresh_from_db()
    assert run.status == RunStatus.PARKED
    assert worker.tick() == 0
    assert list(run.events.values_list("type", flat=True)).count("run.started") == 2


def test_a_webhook_url_with_a_bad_port_does_not_break_maintain(demo, settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "WEBHOOK_ALLOW_PRIVATE": True}
    demo.webhook_url, demo.webhook_secret = "http://127.0.0.1:99999/hook", "0123456789abcdef"
    demo.save()
    _run(demo, "I want a refund for ORD-1003 amount 20")

    from approvals.notify import outbox

    outbox.deliveries_deliver_due()
    assert "port" in Delivery.objects.get(transport=Transport.WEBHOOK).last_error
    report = services.maintain()
    assert all(count >= 0 for count in report.values())


def test_an_operator_hands_a_repaired_parked_run_back_and_it_completes(demo, api):
    # given: a run parked because its snapshot was broken, which an operator then repaired
    run, good = approved_refund_with_a_broken_snapshot(api)
    worker.tick()
    AgentRun.objects.filter(pk=run.pk).update(state_snapshot=good)
    sam, admin = signed_in("sam"), signed_in("admin")
    parked = admin.get("/admin/runs/agentrun/?status__exact=PARKED")
    assert str(run.pk) in parked.text

    # when: a supervisor tries (the action is not theirs), then the operator
    refused = sam.post(
        "/admin/runs/agentrun/", {"action": "unpark_selected", "_selected_action": [run.pk]}
    )
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.PARKED
    admin.post(
        "/admin/runs/agentrun/",
        {"action": "unpark_selected", "_selected_action": [run.pk]},
        follow=True,
    )
    worker.tick()

    # then: the run completed with the refund, once
    run.refresh_from_db()
    assert refused.status_code in (200, 302)
    assert run.status == RunStatus.COMPLETED
    assert "has been issued" in run.result
    assert list(run.events.values_list("type", flat=True)).count("run.unparked") == 1
    assert Approval.objects.get(run=run).status == "EXECUTED"


def test_a_supervisor_cancels_a_run_from_the_admin_and_its_call_leaves_the_inbox(demo):
    run = _run(demo, "I want a refund for ORD-1003 amount 20")
    sam = signed_in("sam")

    page = sam.post(
        "/admin/runs/agentrun/",
        {"action": "cancel_selected", "_selected_action": [run.pk]},
        follow=True,
    )
    again = sam.post(
        "/admin/runs/agentrun/",
        {"action": "cancel_selected", "_selected_action": [run.pk]},
        follow=True,
    )

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert "cancelled." in page.text
    assert "already ended" in again.text
    assert Approval.objects.get(run=run).status == "CANCELLED"

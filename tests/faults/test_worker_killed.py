"""Durability with the real django-q2 cluster: a worker killed mid-tool, and a task delivered
more than once (DESIGN 5: every step is committed, the claim in the database decides)."""

import pytest
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.tasks import async_task

from runs import services
from runs.models import AgentRun, AttemptStatus, ModelAttempt, RunEvent, RunStatus, ToolExecution
from tests.conftest import wait_for

pytestmark = pytest.mark.cluster

STOCK_QUESTION = "Is the shoe of ORD-1002 in stock in size 43?"


def queue_stock_question(api, key: str) -> str:
    response = api("alice").post(
        "/api/v1/runs", {"message": STOCK_QUESTION}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def inside_check_stock(run_id) -> bool:
    return RunEvent.objects.filter(
        run_id=run_id, type="tool.started", data__tool="check_stock"
    ).exists()


def is_finished(run_id) -> bool:
    return AgentRun.objects.get(pk=run_id).is_finished


def assert_timeline_contiguous(run_id) -> None:
    seqs = list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, len(seqs) + 1))
    assert AgentRun.objects.get(pk=run_id).last_event_seq == len(seqs)


def assert_each_tool_ran_once(run_id) -> None:
    executions = ToolExecution.objects.filter(run_id=run_id).order_by("step", "index")
    assert [e.tool for e in executions] == ["lookup_order", "check_stock"]
    keys = [e.idempotency_key for e in executions]
    assert len(set(keys)) == len(keys)
    assert RunEvent.objects.filter(run_id=run_id, type="tool.result").count() == 2


def test_worker_killed_inside_slow_tool_resumes_elsewhere_without_repeating_work(
    demo, api, cluster
):
    # given: a short lease (so the test is quick), though longer than the slow warehouse call:
    # a worker whose lease expired may commit nothing
    env = {"AGENTPORTAL_STOCK_LATENCY_SECONDS": "2", "AGENTPORTAL_LEASE_SECONDS": "3"}
    run_id = queue_stock_question(api, "stock-1002-killed")
    first = cluster(workers=2, env=env)

    # and: cluster A looked the order up and is now waiting on check_stock
    wait_for(lambda: inside_check_stock(run_id), timeout=30, interval=0.05)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    lookup = ToolExecution.objects.get(run_id=run_id, tool="lookup_order")

    # when: the whole cluster dies (SIGKILL, no shutdown)
    first.kill()

    # then: nothing of the interrupted tool was committed; the run still looks RUNNING
    assert not ToolExecution.objects.filter(run_id=run_id, tool="check_stock").exists()
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING

    # when: its lease expires, the backstop re-queues it, and cluster B starts
    wait_for(lambda: AgentRun.objects.get(pk=run_id).lease_expires_at < timezone.now(), timeout=10)
    report = services.maintain()
    assert report["requeued"] == 1
    assert report["ticks"] >= 1
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.QUEUED
    cluster(workers=2, env=env)
    wait_for(lambda: is_finished(run_id), timeout=60, interval=0.1)

    # then: it completed once, with the stock answer
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED, (run.error_code, run.error_detail)
    assert "ORD-1002" in run.result
    assert "Trail running shoes (size 43)" in run.result
    types = list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
    )
    assert types.count("run.completed") == 1
    assert types[-1] == "run.completed"
    started = RunEvent.objects.filter(run_id=run_id, type="run.started").order_by("seq")
    assert [event.data["lease"] for event in started] == [1, 2]

    # and: lookup_order was not run again: the same row, written before the crash
    assert_each_tool_ran_once(run_id)
    again = ToolExecution.objects.get(run_id=run_id, tool="lookup_order")
    assert (again.pk, again.created_at, again.result) == (
        lookup.pk,
        lookup.created_at,
        lookup.result,
    )

    # and: the first model step was answered once; no attempt was lost or repeated
    assert list(
        ModelAttempt.objects.filter(run_id=run_id, step=0).values_list("status", flat=True)
    ) == [AttemptStatus.RESPONDED]
    attempts = ModelAttempt.objects.filter(run_id=run_id)
    assert [a.status for a in attempts] == [AttemptStatus.RESPONDED] * 3
    assert run.model_calls == 3
    assert_timeline_contiguous(run_id)


def test_tick_delivered_several_times_through_cluster_executes_run_once(demo, api, cluster):
    # given: a running cluster with three workers
    cluster(workers=3, env={"AGENTPORTAL_STOCK_LATENCY_SECONDS": "1"})

    # when: the run's tick is delivered three times at once...
    run_id = queue_stock_question(api, "stock-1002-twice")
    async_task("runs.tasks.tick", q_options={"ack_failure": True})
    async_task("runs.tasks.tick", q_options={"ack_failure": True})
    # ...and twice more while a worker is inside the slow tool
    wait_for(lambda: inside_check_stock(run_id), timeout=30, interval=0.05)
    async_task("runs.tasks.tick", q_options={"ack_failure": True})
    async_task("runs.tasks.tick", q_options={"ack_failure": True})
    wait_for(lambda: is_finished(run_id), timeout=60, interval=0.1)
    wait_for(lambda: not get_broker().queue_size(), timeout=30)  # every delivery was taken

    # then: the run was executed once
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED, (run.error_code, run.error_detail)
    events = RunEvent.objects.filter(run_id=run_id)
    assert events.filter(type="run.completed").count() == 1
    assert events.filter(type="run.started").count() == 1
    assert_each_tool_ran_once(run_id)
    attempts = list(
        ModelAttempt.objects.filter(run_id=run_id).values_list("step", "attempt", "status")
    )
    assert [status for _, _, status in attempts] == [AttemptStatus.RESPONDED] * 3
    assert len({(step, attempt) for step, attempt, _ in attempts}) == 3
    assert_timeline_contiguous(run_id)

"""Replayed steps and lost workers never create a second plan or run a tool twice (DESIGN 5,
6.3), and a run keeps the graph version it was queued under."""

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import BusinessEvent, Proposal, Ticket
from runs import services, worker
from runs.models import AgentRelease, AgentRun, Node, RunEvent, RunStatus, ToolExecution
from runs.releases import ReleaseManifest, ToolDeclaration, default_limits
from runs.services import LostRun
from runs.tools import TOOLS
from tests import factories
from tests.approvals.plan_helpers import EXCHANGE
from tests.runs import helpers


def _queue(demo, message: str = EXCHANGE) -> AgentRun:
    return factories.run_queue(
        customer=User.objects.get(username="alice"), merchant=demo, message=message
    )


def _next_call(run: AgentRun) -> str | None:
    if run.next_node != Node.TOOLS:
        return None
    return run.messages[-1]["tool_calls"][0]["function"]["name"]


def _step_until(lease, predicate) -> AgentRun:
    run = lease.run
    while not predicate(run):
        run = helpers.run_step(lease)
    return run


def _lease_expires(run_id) -> None:
    AgentRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def _publish(demo, graph_version: str, tools: list[str]) -> AgentRelease:
    latest = AgentRelease.objects.filter(merchant=demo).order_by("-version").first()
    manifest = ReleaseManifest(
        tools=[ToolDeclaration(name=name) for name in tools], limits=default_limits()
    )
    return services.release_save(
        release=AgentRelease(
            merchant=demo,
            version=latest.version + 1,
            graph_version=graph_version,
            manifest=manifest.model_dump(),
            published=True,
        )
    )


def test_tool_graph_creates_one_proposal_on_replay(demo):
    # given: worker A is about to propose the plan when its lease expires and B claims the run
    run = _queue(demo)
    stale = helpers.run_claim()
    _step_until(stale, lambda r: _next_call(r) == "create_exchange_proposal")
    _lease_expires(run.pk)
    fresh = helpers.run_claim()
    assert fresh.run_id == run.pk and fresh.token > stale.token

    # when: both execute the proposal step
    fresh_run = helpers.run_step(fresh)
    try:
        helpers.run_step(stale)
        raise AssertionError("the stale worker committed")
    except LostRun:
        pass

    # then: one ticket, one proposal, one proposed event; the run waits once
    assert fresh_run.status == RunStatus.WAITING_USER
    assert Ticket.objects.filter(run=run).count() == 1
    assert Proposal.objects.filter(ticket__run=run).count() == 1
    assert BusinessEvent.objects.filter(run=run, kind="proposed").count() == 1
    assert RunEvent.objects.filter(run=run, type="plan.proposed").count() == 1
    run.refresh_from_db()
    assert run.domain_event_cursor == BusinessEvent.objects.get(run=run).pk


def test_a_graph_without_business_waits_creates_one_proposal_on_replay(demo):
    # given: a v9 run whose lost worker created the ticket but never committed its step
    _publish(demo, "after-sales-v9", list(TOOLS))
    run = _queue(demo)
    stale = helpers.run_claim()
    _step_until(stale, lambda r: _next_call(r) == "create_exchange_proposal")
    _lease_expires(run.pk)
    fresh = helpers.run_claim()
    try:
        helpers.run_step(stale)
        raise AssertionError("the stale worker committed")
    except LostRun:
        pass
    assert Ticket.objects.filter(run=run).count() == 1

    # when: the new lease holder replays the step
    worker.run_slices([fresh])

    # then: it found the same ticket and the run completed with it
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert Ticket.objects.filter(run=run).count() == Proposal.objects.count() == 1
    [execution] = ToolExecution.objects.filter(run=run, tool="create_exchange_proposal")
    assert execution.result["ticket_id"] == str(Ticket.objects.get().pk)


def test_expired_lease_resumes_committed_tool_without_duplicate(demo):
    # given: a worker that committed the eligibility check, then vanished
    run = _queue(demo)
    lost = helpers.run_claim()
    _step_until(lost, lambda r: _next_call(r) == "check_exchange_eligibility")
    helpers.run_step(lost)
    committed = ToolExecution.objects.get(run=run, tool="check_exchange_eligibility")
    _lease_expires(run.pk)

    # when: maintain hands the run back and another worker takes it
    assert services.maintain()["requeued"] == 1
    worker.tick()

    # then: it carried on from the committed result to the plan's wait, executing nothing twice
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_USER
    executions = list(ToolExecution.objects.filter(run=run).values_list("tool", flat=True))
    assert sorted(executions) == ["check_exchange_eligibility", "lookup_order"]
    assert ToolExecution.objects.get(run=run, tool="check_exchange_eligibility") == committed
    results = RunEvent.objects.filter(run=run, type="tool.result")
    assert results.count() == 2
    assert Ticket.objects.filter(run=run).count() == 1


def test_registered_old_graph_remains_executable(demo):
    # given: a run queued under v9 with a release that declares only the exchange tools
    exchange_tools = ["lookup_order", "check_exchange_eligibility", "create_exchange_proposal"]
    _publish(demo, "after-sales-v9", exchange_tools)
    old = _queue(demo)
    vague_old = _queue(demo, "I want to exchange my shoes for size 43")

    # when: the shop publishes v10 with every tool, and a new run is queued
    _publish(demo, "after-sales-v10", list(TOOLS))
    new = _queue(demo)
    worker.tick()

    # then: the v9 run kept its graph, its tools and its behaviour: no wait, completed
    old.refresh_from_db()
    new.refresh_from_db()
    vague_old.refresh_from_db()
    assert (old.graph_version, old.status) == ("after-sales-v9", RunStatus.COMPLETED)
    assert "exchange plan" in old.result
    assert Ticket.objects.get(run=old).status == "WAITING_CONFIRMATION"
    assert vague_old.status == RunStatus.COMPLETED  # no request_clarification declared to it
    assert "Which order" in vague_old.result
    assert (new.graph_version, new.status) == ("after-sales-v10", RunStatus.WAITING_USER)
    assert new.wait_state["kind"] == "confirmation"

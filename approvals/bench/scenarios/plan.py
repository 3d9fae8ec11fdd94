"""`plan`: an exchange each, run by `runportal` until its plan waits; 32 clients confirm them
as the customers, then approve them as a supervisor, all over HTTP, and the reconcile tasks
resume the runs (runs/s is then end to end, people included). Adds each phase's rate, and
the reconcile sweep's cost with --waiting runs waiting on plans, a hundred of them changed."""

import time
from datetime import timedelta

from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.utils import timezone

from agentportal.models import Merchant, Role
from agentportal.principals import Principal
from agentportal.services import api_key_create
from approvals import plans
from approvals.bench.calibrated import calibrated
from approvals.bench.context import Bench
from approvals.bench.measure import post_concurrently
from approvals.bench.processes import portal_stop
from approvals.bench.registry import Option, Scenario, register
from approvals.bench.shop import BENCH_SUPERVISOR, EXCHANGE, RUNS_PER_ACCOUNT, BenchShop
from approvals.bench.throughput import figures
from approvals.models import BusinessEvent, Order, Proposal, Ticket, TicketStatus
from runs import services
from runs.metrics import Counter
from runs.models import FINISHED_STATUSES, AgentRun, RunStatus


def plan(bench: Bench) -> dict:
    return calibrated(bench, EXCHANGE, lambda shop: _measure(bench, shop), resume=_plans_agree)


def _plans_agree(merchant: Merchant) -> None:
    """The calibration's `resume`: every waiting plan confirmed and approved through the
    services, reconciled after each command as the tasks would."""
    supervisor = User.objects.get(username=BENCH_SUPERVISOR)
    reviewer = Principal(merchant=merchant, role=Role.SUPERVISOR, user=supervisor)
    for ticket in Ticket.objects.filter(merchant=merchant).select_related("customer"):
        customer = Principal(merchant=merchant, role=Role.CUSTOMER, user=ticket.customer)
        plans.ticket_confirm(ticket=ticket, principal=customer, proposal_version=1)
        plans.plan_reconcile(run_id=ticket.run_id)
        plans.ticket_decide(
            ticket=ticket, principal=reviewer, proposal_version=1, decision="approve", note=""
        )
        plans.plan_reconcile(run_id=ticket.run_id)


def _measure(bench: Bench, shop: BenchShop) -> dict:
    result = _plans(bench, shop)
    shop.clear()
    result["reconcile"] = _reconcile_sweep(shop, bench.options["waiting"])
    shop.clear()
    return result


def _plans(bench: Bench, shop: BenchShop) -> dict:
    merchant, runs = shop.merchant, bench.runs
    supervisor = User.objects.get(username=BENCH_SUPERVISOR)
    _, supervisor_key = api_key_create(merchant=merchant, role="supervisor", user=supervisor)
    customer_keys = {
        c.pk: api_key_create(merchant=merchant, role="customer", user=c)[1]
        for c in shop.customers()[: -(-runs // RUNS_PER_ACCOUNT)]
    }
    shop.queue(runs)
    port, portal = bench.processes.portal(bench.workers)
    base = f"http://127.0.0.1:{port}/api/v1"
    tickets = Ticket.objects.filter(merchant=merchant)
    runs_of = AgentRun.objects.filter(merchant=merchant)
    phases = {}
    try:
        ends = time.monotonic() + bench.timeout

        def wait_until(done, what: str) -> None:
            while not done():
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError(f"{what}: timed out; see the log")
                time.sleep(0.05)

        wait_until(
            lambda: runs_of.filter(status=RunStatus.WAITING_USER).count() == runs,
            "plans proposed",
        )
        confirmations = [
            (customer_keys[customer_id], f"/tickets/{ticket_id}/confirm", {"proposal_version": 1})
            for ticket_id, customer_id in tickets.values_list("pk", "customer_id")
        ]
        phases["confirm"] = post_concurrently(base, confirmations)
        wait_until(
            lambda: runs_of.filter(status=RunStatus.WAITING_APPROVAL).count() == runs,
            "confirmations reconciled",
        )
        decisions = [
            (
                supervisor_key,
                f"/tickets/{ticket_id}/decide",
                {"proposal_version": 1, "decision": "approve"},
            )
            for ticket_id in tickets.values_list("pk", flat=True)
        ]
        phases["decide"] = post_concurrently(base, decisions)
        wait_until(
            lambda: runs_of.filter(status__in=FINISHED_STATUSES).count() == runs, "runs finished"
        )
    finally:
        portal_stop(portal)
    # The rate is end to end here: from the first run's start to the last answer, the
    # people's confirmations and decisions included.
    result = figures(merchant, runs)
    result["plans"] = {"approved": tickets.filter(status=TicketStatus.APPROVED).count(), **phases}
    return result


def _reconcile_sweep(shop: BenchShop, waiting: int, changed: int = 100) -> dict:
    """The maintain sweep's cost with `waiting` runs waiting on plans: first with nothing
    new, then after `changed` of them were confirmed."""
    merchant = shop.merchant
    _waiting_plans(shop, waiting)
    counter = Counter()
    with counter.counting():
        started = time.perf_counter()
        plans.plans_reconcile_due()
        idle_ms = (time.perf_counter() - started) * 1000
    idle_queries = counter.queries
    for ticket in Ticket.objects.filter(merchant=merchant).select_related("customer")[:changed]:
        plans.ticket_confirm(
            ticket=ticket,
            principal=Principal(merchant=merchant, role=Role.CUSTOMER, user=ticket.customer),
            proposal_version=1,
        )
    counter = Counter()
    with counter.counting():
        started = time.perf_counter()
        applied = plans.plans_reconcile_due()
        busy_ms = (time.perf_counter() - started) * 1000
    moved = AgentRun.objects.filter(merchant=merchant, status=RunStatus.WAITING_APPROVAL)
    if applied != changed or moved.count() != changed:
        raise CommandError(f"reconcile applied {applied} events, {moved.count()} runs moved")
    return {
        "waiting": waiting,
        "idle_pass_ms": round(idle_ms, 1),
        "idle_pass_queries": idle_queries,
        "changed": changed,
        "pass_ms": round(busy_ms, 1),
        "queries": counter.queries,
        "queries_per_changed_run": round((counter.queries - idle_queries) / changed, 1),
    }


def _waiting_plans(shop: BenchShop, count: int) -> None:
    """`count` runs waiting for their plans' confirmation, written in bulk."""
    merchant = shop.merchant
    customers = list(shop.customers()[:50])
    orders = {o.customer_id: o for o in Order.objects.filter(customer__in=customers)}
    items = [{"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-43", "quantity": 1}]
    release = services.release_resolve(merchant=merchant)
    for offset in range(0, count, 1000):
        batch = range(offset, min(count, offset + 1000))
        run_rows, ticket_rows = [], []
        for index in batch:
            customer = customers[index % len(customers)]
            run = AgentRun(
                merchant=merchant,
                account=customer,
                status=RunStatus.WAITING_USER,
                next_node="tools",
                graph_version=release["graph_version"],
                release_snapshot=release,
                messages=[],
                wait_deadline_at=timezone.now() + timedelta(days=1),
            )
            key = f"bench:{run.pk}:1:0"
            ticket = Ticket(
                merchant=merchant,
                run=run,
                customer=customer,
                order=orders[customer.pk],
                tool_execution_key=key,
            )
            run.wait_state = plans.plan_wait(
                key=key,
                ticket_id=ticket.pk,
                version=1,
                ticket_status=TicketStatus.WAITING_CONFIRMATION,
                tool_name="create_exchange_proposal",
                tool_args={"order_id": orders[customer.pk].number, "items": items},
            )[1].dump()
            run_rows.append(run)
            ticket_rows.append(ticket)
        AgentRun.objects.bulk_create(run_rows)
        Ticket.objects.bulk_create(ticket_rows)
        Proposal.objects.bulk_create(
            [Proposal(ticket=t, version=1, items=items, summary="bench") for t in ticket_rows]
        )
        events = BusinessEvent.objects.bulk_create(
            [
                BusinessEvent(
                    merchant=merchant,
                    ticket=t,
                    run=t.run,
                    kind="proposed",
                    proposal_version=1,
                    actor="agent",
                )
                for t in ticket_rows
            ]
        )
        cursors = {e.run_id: e.pk for e in events if e.pk is not None}
        if not cursors:  # a backend that does not return the new ids
            cursors = dict(
                BusinessEvent.objects.filter(ticket__in=ticket_rows).values_list("run_id", "pk")
            )
        for run in run_rows:
            run.domain_event_cursor = cursors[run.pk]
        AgentRun.objects.bulk_update(run_rows, ["domain_event_cursor"])


register(
    Scenario(
        name="plan",
        run=plan,
        options=(
            Option("--waiting", "runs waiting on plans (default 10,000)", type=int, default=10_000),
        ),
    )
)

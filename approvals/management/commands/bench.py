"""Throughput and cost of scripted after-sales runs through the real worker cluster.

Two phases, on the database in DATABASE_URL:
1. calibration, in this process: a few runs queued and executed by the same code the workers
   run, counting every SQL statement and every commit (queries per step, commits per run);
2. throughput: N runs queued first, then a `qcluster` subprocess with W workers started to
   execute them; the clock starts when the first run starts, so the figures are the workers'
   and not this process's queueing (runs/s, steps/s, and per run the time from the later of
   its queueing and that start to its completion).
The `approval` scenario is a refund each: `runportal` (web and workers) runs them until they
wait, then 32 concurrent clients approve them over HTTP; it adds the decisions' rate and
latency. The `plan` scenario is an exchange each: `runportal` runs them until their plans
wait, 32 clients confirm them as the customers, then approve them as a supervisor, all over
HTTP, and the reconcile tasks resume the runs (runs/s is then end to end, people included);
it adds each phase's rate and the reconcile
sweep's cost with --waiting runs (default 10,000) waiting on plans, a hundred of them changed.
The `auto_approval` scenario is the `approval` one's refund under a policy that approves it
with no person: the throughput phase, end to end.
The `scale` scenario seeds history (shops, finished runs with their events, decided calls) at
each of --sizes and times each hot path there, in this process; it writes a table and a plot
of the curves to --artifacts, with the resident memory of a web and a worker process at the
largest size (see _scale.py).
The `stop` scenario measures /stop: one worker is inside a slow warehouse call when a customer
sends /stop; it reports the request's latency and the time from its answer until
the worker abandoned the run (it starts the run queued behind it). The last line printed is
one JSON object.
"""

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Max, Min, Sum
from django.utils import timezone

from agentportal.models import Membership, Merchant, Role
from agentportal.principals import Principal
from agentportal.services import api_key_create
from approvals import plans
from approvals import services as approval_services
from approvals.bench.measure import (
    free_port,
    percentiles,
    post_concurrently,
    post_json,
    with_spread,
)
from approvals.bench.scenarios.llm import LlmScenario
from approvals.bench.scenarios.scale import ScaleScenario, sizes_parse
from approvals.bench.scenarios.streams import StreamsScenario
from approvals.models import (
    Approval,
    ApprovalStatus,
    BusinessEvent,
    Order,
    OrderStatus,
    Proposal,
    Refund,
    StockLevel,
    Ticket,
    TicketStatus,
)
from approvals.policies import PolicyRules, policy_update
from runs import services, worker
from runs.metrics import Counter
from runs.models import AgentRun, RunEvent, RunStatus

BENCH_SHOP = "bench-shop"
BENCH_SUPERVISOR = "bench-supervisor"
RUNS_PER_ACCOUNT = 3  # the open-run limit per account
MESSAGES = {
    "plain": "What is the status of order {order}?",
    "approval": "I want a refund for {order} amount 10",
    # Under the bench shop's policy for this scenario, refunds up to 10.00 need nobody.
    "auto_approval": "I want a refund for {order} amount 10",
    "stop": "What is the status of order {order}?",
    "plan": "I want to exchange the shoes from order {order} for size 43",
    "llm": "What is the status of order {order}?",
    "streams": "I want a refund for {order} amount 10",
}
STOCK_QUESTION = "Is the shoe of {order} in stock in size 43?"
FINISHED = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]


class Command(LlmScenario, StreamsScenario, ScaleScenario, BaseCommand):
    help = "Benchmark scripted runs through the real worker cluster; prints one JSON line last."

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, default=1000)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--scenario", choices=sorted([*MESSAGES, "scale"]), default="plain")
        parser.add_argument("--calibration-runs", type=int, default=30)
        parser.add_argument("--timeout", type=float, default=600.0)
        parser.add_argument("--log", default=os.devnull, help="Where the workers' output goes.")
        parser.add_argument(
            "--waiting", type=int, default=10_000, help="Runs waiting on plans (plan scenario)."
        )
        parser.add_argument("--shops", type=int, default=20, help="Shops (llm scenario).")
        parser.add_argument(
            "--capacity", type=int, default=32, help="Each shop's capacity (llm scenario)."
        )
        parser.add_argument(
            "--model-latency", type=float, default=1.0, help="Seconds a model call takes (llm)."
        )
        parser.add_argument(
            "--one-call", action="store_true", help="The model answers text at once (llm)."
        )
        parser.add_argument(
            "--rate",
            type=float,
            default=0.0,
            help=(
                "Runs arriving a second while the workers run (llm; default: all at once), "
                "or decisions a second (streams; default 20)."
            ),
        )
        parser.add_argument(
            "--streams",
            type=int,
            default=1000,
            help="Event streams held open (streams; 0: the decisions alone, for comparison).",
        )
        parser.add_argument(
            "--web-processes",
            type=int,
            default=settings.AGENTPORTAL["WEB_PROCESSES"],
            help="The web server's processes (streams).",
        )
        parser.add_argument(
            "--sizes",
            default="1000:100000,10000:1000000",
            help="Sizes as shops:finished-runs pairs, growing (scale).",
        )
        parser.add_argument(
            "--repeat",
            type=int,
            help=(
                "Timings of each path per size (scale; default 15), or throughput runs "
                "(plain, auto_approval, llm; default 3): the figures are the median run's, "
                "with the spread of all."
            ),
        )
        parser.add_argument(
            "--no-rss",
            action="store_true",
            help="Skip starting the portal to read its processes' memory (scale).",
        )
        parser.add_argument(
            "--artifacts",
            default=str(settings.BASE_DIR / "artifacts"),
            help="Where the curves are written (scale).",
        )

    def handle(
        self,
        *args,
        runs,
        workers,
        scenario,
        calibration_runs,
        timeout,
        log,
        waiting,
        shops,
        capacity,
        model_latency,
        one_call,
        rate,
        streams,
        web_processes,
        **options,
    ):
        if runs < 1 or workers < 1:
            raise CommandError("--runs and --workers must be at least 1")
        self.scenario = scenario
        self._portal_log = open(log, "a")  # noqa: SIM115 (children write to it until the end)
        repeat = options["repeat"] or (15 if scenario == "scale" else 3)
        if repeat < 1:
            raise CommandError("--repeat must be at least 1")
        if scenario == "scale":
            result = self._scale(
                sizes=sizes_parse(options["sizes"]),
                repeat=repeat,
                rss=not options["no_rss"],
                artifacts=Path(options["artifacts"]),
            )
            result.update({"scenario": scenario, "database": connection.vendor})
            self.stdout.write(json.dumps(result))
            return
        merchant = self._bench_shop(max(runs, calibration_runs))
        self._clear(merchant)
        policy_update(
            merchant=merchant,
            tool_name="issue_refund",
            rules=PolicyRules(
                amount_field="amount",
                auto_approve_up_to=Decimal("10.00") if scenario == "auto_approval" else None,
            ),
        )
        queries_per_step, commits_per_run = self._calibrate(merchant, calibration_runs)
        self._clear(merchant)
        if scenario == "approval":
            result = self._decisions(merchant, runs, workers, timeout)
        elif scenario == "stop":
            workers = 1  # the queued run must wait for the very worker that is stopped
            result = self._stops(merchant, runs, timeout)
        elif scenario == "plan":
            result = self._plans(merchant, runs, workers, timeout)
            self._clear(merchant)
            result["reconcile"] = self._reconcile_sweep(merchant, waiting)
            self._clear(merchant)
        elif scenario == "llm":
            if shops < 1 or capacity < 1 or model_latency < 0 or rate < 0:
                raise CommandError(
                    "--shops and --capacity must be at least 1, a latency and a rate 0 or more"
                )
            result = self._repeated(
                lambda: self._llm_throughput(
                    runs=runs,
                    workers=workers,
                    shops=shops,
                    capacity=capacity,
                    latency=model_latency,
                    one_call=one_call,
                    timeout=timeout,
                    rate=rate,
                ),
                repeat,
            )
        elif scenario == "streams":
            if streams < 0 or web_processes < 1 or rate < 0:
                raise CommandError("--streams must be 0 or more, --web-processes at least 1")
            merchant = self._bench_shop(streams + runs, capacity=64)
            result = self._streams(
                merchant,
                decisions=runs,
                streams=streams,
                rate=rate or 20.0,
                workers=workers,
                web_processes=web_processes,
                timeout=timeout,
            )
        else:
            result = self._repeated(
                lambda: self._throughput(merchant, runs, workers, timeout), repeat, merchant
            )
        result.update(
            {
                "scenario": scenario,
                "database": connection.vendor,
                "runs": runs,
                "workers": workers,
                "queries_per_step": round(queries_per_step, 2),
                "commits_per_run": round(commits_per_run, 2),
            }
        )
        order = [
            "scenario",
            "database",
            "runs",
            "workers",
            "wall_s",
            "runs_per_s",
            "runs_per_s_spread",
            "steps_per_s",
            "queued_to_done_ms",
            "queries_per_step",
            "commits_per_run",
            "shops",
            "capacity",
            "model_latency_s",
            "max_in_flight",
            "model_calls",
            "ideal_runs_per_s",
            "rss_mb",
            "stream_deltas",
            "first_delta_ms",
            "first_delta_runs",
            "publish_to_heard_ms",
            "first_word_ms",
            "arrival_rate",
            "streams",
            "decisions",
            "stops",
            "plans",
            "reconcile",
        ]
        self.stdout.write(json.dumps({key: result[key] for key in order if key in result}))

    # --- set-up ------------------------------------------------------------------------------

    def _bench_shop(self, runs: int, slug: str = BENCH_SHOP, capacity: int = 64) -> Merchant:
        """A shop with enough customers (each with an order) to queue every run at once."""
        merchant, _ = Merchant.objects.get_or_create(
            slug=slug, defaults={"name": "Benchmark shop", "max_running_runs": capacity}
        )
        if merchant.max_running_runs != capacity:
            merchant.max_running_runs = capacity
            merchant.save(update_fields=["max_running_runs"])
        prefix = "bench" if slug == BENCH_SHOP else slug
        for sku in ("SHOE-TRAIL-42", "SHOE-TRAIL-43"):
            StockLevel.objects.get_or_create(
                merchant=merchant, sku=sku, defaults={"quantity": 1_000_000}
            )
        supervisor, made = User.objects.get_or_create(username=BENCH_SUPERVISOR)
        if made:
            Membership.objects.create(user=supervisor, merchant=merchant, role=Role.SUPERVISOR)
        needed = -(-runs // RUNS_PER_ACCOUNT)
        existing = self._customers(merchant).count()
        if existing < needed:
            users = User.objects.bulk_create(
                [
                    User(username=f"{prefix}-{index}", password="!")
                    for index in range(existing, needed)
                ]
            )
            users = list(User.objects.filter(username__in=[u.username for u in users]))
            Membership.objects.bulk_create(
                [Membership(user=u, merchant=merchant, role=Role.CUSTOMER) for u in users]
            )
            placed = datetime(2026, 11, 2, tzinfo=UTC)
            Order.objects.bulk_create(
                [
                    Order(
                        merchant=merchant,
                        number=_order_of(u),
                        customer=u,
                        status=OrderStatus.DELIVERED,
                        items=[
                            {
                                "sku": "SHOE-TRAIL-42",
                                "name": "Trail running shoes",
                                "size": "42",
                                "quantity": 1,
                                "unit_price": "89.90",
                                "exchangeable": True,
                            }
                        ],
                        total=Decimal("89.90"),
                        placed_at=placed,
                        delivered_at=placed,
                    )
                    for u in users
                ]
            )
        return merchant

    def _customers(self, merchant: Merchant):
        return User.objects.filter(
            memberships__merchant=merchant, memberships__role=Role.CUSTOMER
        ).order_by("pk")

    def _clear(self, merchant: Merchant) -> None:
        """Forget the bench shop's earlier runs and refunds (and nothing of other shops)."""
        AgentRun.objects.filter(merchant=merchant).delete()
        Refund.objects.filter(merchant=merchant).delete()
        Order.objects.filter(merchant=merchant).update(refunded=0)

    def _queue(self, merchant: Merchant, count: int) -> None:
        for customer in self._senders(merchant, count):
            self._queue_one(merchant, customer)

    def _senders(self, merchant: Merchant, count: int) -> list[User]:
        """Who sends each of `count` runs, each customer at most RUNS_PER_ACCOUNT."""
        customers = list(self._customers(merchant)[: -(-count // RUNS_PER_ACCOUNT)])
        return [customers[index // RUNS_PER_ACCOUNT] for index in range(count)]

    def _queue_one(self, merchant: Merchant, customer: User) -> None:
        message = MESSAGES[self.scenario].format(order=_order_of(customer))
        services.queue_run(
            merchant=merchant, account=customer, messages=[{"role": "user", "content": message}]
        )

    # --- phases ------------------------------------------------------------------------------

    def _calibrate(self, merchant: Merchant, count: int) -> tuple[float, float]:
        counter = Counter()
        with counter.counting():
            self._queue(merchant, count)
            tick_queries_from = counter.queries
            worker.tick()
            tick_queries = counter.queries - tick_queries_from
            if self.scenario in ("approval", "streams"):
                supervisor = User.objects.get(username=BENCH_SUPERVISOR)
                principal = Principal(merchant=merchant, role=Role.SUPERVISOR, user=supervisor)
                for approval in Approval.objects.filter(merchant=merchant).select_related("run"):
                    approval_services.approval_decide(
                        run=approval.run,
                        principal=principal,
                        request=approval_services.DecisionRequest(
                            interrupt_id=approval.interrupt_id, decision="approve"
                        ),
                    )
                resumed_from = counter.queries
                worker.tick()
                tick_queries += counter.queries - resumed_from
            if self.scenario == "plan":
                self._calibrate_plans(merchant)
                resumed_from = counter.queries
                worker.tick()
                tick_queries += counter.queries - resumed_from
        done = AgentRun.objects.filter(merchant=merchant, status=RunStatus.COMPLETED)
        if done.count() != count:
            raise CommandError(f"calibration: {done.count()} of {count} runs completed")
        steps = done.aggregate(steps=Sum("step"))["steps"]
        return tick_queries / steps, counter.commits / count

    def _calibrate_plans(self, merchant: Merchant) -> None:
        """Confirm and approve every waiting plan through the services, reconciling after each
        command as the tasks would."""
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

    def _repeated(self, measure, repeat: int, merchant: Merchant | None = None) -> dict:
        """The median run's figures of `repeat` throughput runs, with the spread of all: a
        stall shows as a spread, never hides in one figure."""
        results = []
        for index in range(repeat):
            if merchant is not None:
                self._clear(merchant)
            results.append(measure())
            self.stderr.write(f"run {index + 1} of {repeat}: {results[-1]['runs_per_s']} runs/s")
        return with_spread(results, "runs_per_s")

    def _throughput(self, merchant: Merchant, runs: int, workers: int, timeout: float) -> dict:
        self._queue(merchant, runs)
        cluster = self._start_cluster(workers)
        try:
            ends = time.monotonic() + timeout
            pending = AgentRun.objects.filter(merchant=merchant).exclude(
                status__in=[RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]
            )
            while pending.exists():
                if time.monotonic() > ends or cluster.poll() is not None:
                    raise CommandError(f"{pending.count()} runs unfinished; see the cluster log")
                time.sleep(0.05)
        finally:
            self._stop_cluster(cluster)
        return self._figures(merchant, runs)

    def _figures(self, merchant: Merchant | list[Merchant], runs: int) -> dict:
        merchants = merchant if isinstance(merchant, list) else [merchant]
        finished = AgentRun.objects.filter(merchant__in=merchants)
        failed = finished.exclude(status=RunStatus.COMPLETED).count()
        if failed:
            raise CommandError(f"{failed} runs did not complete")
        span = finished.aggregate(end=Max("finished_at"), steps=Sum("step"))
        start = RunEvent.objects.filter(run__merchant__in=merchants, type="run.started").aggregate(
            start=Min("created_at")
        )["start"]
        wall = (span["end"] - start).total_seconds()
        latencies = sorted(
            (done - max(created, start)).total_seconds() * 1000
            for created, done in finished.values_list("created_at", "finished_at")
        )
        return {
            "wall_s": round(wall, 3),
            "runs_per_s": round(runs / wall, 1),
            "steps_per_s": round(span["steps"] / wall, 1),
            "queued_to_done_ms": {
                "p50": round(statistics.median(latencies), 1),
                "p95": round(latencies[max(0, int(len(latencies) * 0.95) - 1)], 1),
            },
        }

    def _decisions(self, merchant: Merchant, runs: int, workers: int, timeout: float) -> dict:
        """Refunds run by `runportal` until they wait; 32 clients approve them over HTTP."""
        supervisor = User.objects.get(username=BENCH_SUPERVISOR)
        _, key = api_key_create(merchant=merchant, role="supervisor", user=supervisor)
        self._queue(merchant, runs)
        port, portal = self._start_portal(workers)
        try:
            ends = time.monotonic() + timeout
            waiting = Approval.objects.filter(
                merchant=merchant, status=ApprovalStatus.PENDING_APPROVAL
            )
            while waiting.count() < runs:
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError(f"only {waiting.count()} of {runs} runs came to wait")
                time.sleep(0.1)
            decided = post_concurrently(
                f"http://127.0.0.1:{port}/api/v1",
                [
                    (key, f"/approvals/{interrupt_id}/decision", {"decision": "approve"})
                    for interrupt_id in waiting.values_list("interrupt_id", flat=True)
                ],
            )
            self.stderr.write(f"decisions: {json.dumps(decided)}")
            pending = AgentRun.objects.filter(merchant=merchant).exclude(
                status__in=[RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]
            )
            while pending.exists():
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError(f"{pending.count()} runs unfinished after decisions")
                time.sleep(0.05)
        finally:
            self._stop_portal(portal)
        result = self._figures(merchant, runs)
        result["decisions"] = decided
        return result

    def _plans(self, merchant: Merchant, runs: int, workers: int, timeout: float) -> dict:
        """Exchanges run by `runportal` until their plans wait; the customers confirm them and
        a supervisor approves them over HTTP; reconcile resumes the runs to their answers."""
        supervisor = User.objects.get(username=BENCH_SUPERVISOR)
        _, supervisor_key = api_key_create(merchant=merchant, role="supervisor", user=supervisor)
        customer_keys = {
            c.pk: api_key_create(merchant=merchant, role="customer", user=c)[1]
            for c in self._customers(merchant)[: -(-runs // RUNS_PER_ACCOUNT)]
        }
        self._queue(merchant, runs)
        port, portal = self._start_portal(workers)
        base = f"http://127.0.0.1:{port}/api/v1"
        tickets = Ticket.objects.filter(merchant=merchant)
        runs_of = AgentRun.objects.filter(merchant=merchant)
        phases = {}
        try:
            ends = time.monotonic() + timeout

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
                (
                    customer_keys[customer_id],
                    f"/tickets/{ticket_id}/confirm",
                    {"proposal_version": 1},
                )
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
            wait_until(lambda: runs_of.filter(status__in=FINISHED).count() == runs, "runs finished")
        finally:
            self._stop_portal(portal)
        # _figures' rate is end to end here: from the first run's start to the last answer,
        # the people's confirmations and decisions included.
        result = self._figures(merchant, runs)
        result["plans"] = {
            "approved": tickets.filter(status=TicketStatus.APPROVED).count(),
            **phases,
        }
        return result

    def _reconcile_sweep(self, merchant: Merchant, waiting: int, changed: int = 100) -> dict:
        """The maintain sweep's cost with `waiting` runs waiting on plans: first with nothing
        new, then after `changed` of them were confirmed."""
        self._waiting_plans(merchant, waiting)
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

    def _waiting_plans(self, merchant: Merchant, count: int) -> None:
        """`count` runs waiting for their plans' confirmation, written in bulk."""
        customers = list(self._customers(merchant)[:50])
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

    def _start_portal(
        self, workers: int, *, web_processes: int | None = None, env: dict | None = None
    ) -> tuple[int, subprocess.Popen]:
        port = free_port()
        web = [] if web_processes is None else ["--web-processes", str(web_processes)]
        portal = subprocess.Popen(
            [
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "runportal",
                "--port",
                str(port),
                "--workers",
                str(workers),
                *web,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._portal_log,
            # The benchmark measures throughput, not the per-key rate limit its clients share.
            env={**os.environ, "AGENTPORTAL_API_RATE": "1000000/minute", **(env or {})},
        )
        ends = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                return port, portal
            except OSError:
                if time.monotonic() > ends or portal.poll() is not None:
                    raise CommandError("runportal did not come up") from None
                time.sleep(0.2)

    def _stops(self, merchant: Merchant, stops: int, timeout: float) -> dict:
        """/stop while the only worker waits on the warehouse; a second conversation's run
        waits behind it, and its start marks the moment the worker let go."""
        customers = list(self._customers(merchant)[:2])
        keys = {
            c.pk: api_key_create(merchant=merchant, role="customer", user=c)[1] for c in customers
        }
        port, portal = self._start_portal(1)
        base = f"http://127.0.0.1:{port}/api/v1"
        request_ms, abandon_ms = [], []
        delays = random.Random(7)
        try:
            for index in range(stops):
                ends = time.monotonic() + timeout
                slow, other = customers[index % 2], customers[(index + 1) % 2]
                order = _order_of(slow)
                stopped = post_json(base, keys[slow.pk], "/conversations", {})["id"]
                run_id = post_json(
                    base,
                    keys[slow.pk],
                    f"/conversations/{stopped}/messages",
                    {"text": STOCK_QUESTION.format(order=order)},
                )["run_id"]
                while not RunEvent.objects.filter(
                    run_id=run_id, type="tool.started", data__tool="check_stock"
                ).exists():
                    if time.monotonic() > ends or portal.poll() is not None:
                        raise CommandError("the slow tool never started")
                    time.sleep(0.01)
                # Somewhere inside the warehouse call, at random: a fixed delay would always
                # hit the same phase of the worker's 250 ms cancellation poll.
                time.sleep(delays.uniform(0.3, 1.5))
                behind = post_json(base, keys[other.pk], "/conversations", {})["id"]
                waiting = post_json(
                    base,
                    keys[other.pk],
                    f"/conversations/{behind}/messages",
                    {"text": MESSAGES["plain"].format(order=_order_of(other))},
                )["run_id"]
                started = time.perf_counter()
                post_json(
                    base, keys[slow.pk], f"/conversations/{stopped}/messages", {"text": "/stop"}
                )
                request_ms.append((time.perf_counter() - started) * 1000)
                answered = timezone.now()
                while not (
                    event := RunEvent.objects.filter(run_id=waiting, type="run.started").first()
                ):
                    if time.monotonic() > ends or portal.poll() is not None:
                        raise CommandError("the worker never let go of the stopped run")
                    time.sleep(0.005)
                abandon_ms.append(max(0.0, (event.created_at - answered).total_seconds() * 1000))
                while not AgentRun.objects.get(pk=waiting).is_finished:
                    time.sleep(0.01)
        finally:
            self._stop_portal(portal)
        return {
            "stops": {
                "count": stops,
                "request_ms": percentiles(request_ms),
                "abandon_ms": percentiles(abandon_ms),
            }
        }

    def _start_cluster(self, workers: int, env: dict[str, str] | None = None) -> subprocess.Popen:
        env = {**os.environ, "AGENTPORTAL_WORKERS": str(workers), **(env or {})}
        return subprocess.Popen(
            [sys.executable, str(settings.BASE_DIR / "manage.py"), "qcluster"],
            env=env,
            stdout=self._portal_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _stop_portal(self, portal: subprocess.Popen) -> None:
        if portal.poll() is None:
            portal.send_signal(signal.SIGTERM)
            portal.wait(timeout=60)

    def _stop_cluster(self, cluster: subprocess.Popen) -> None:
        if cluster.poll() is None:
            cluster.send_signal(signal.SIGTERM)
            try:
                cluster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(cluster.pid, signal.SIGKILL)
                cluster.wait()


def _order_of(customer: User) -> str:
    return f"ORD-{500000 + int(customer.username.rsplit('-', 1)[1])}"

"""What every scenario but `scale` does around its measure: the bench shop made ready, its
approval policy set, a few runs executed in this process by the code the workers run while
every SQL statement and commit is counted (queries per step, commits per run), and the JSON
line's keys in their order."""

from collections.abc import Callable
from decimal import Decimal

from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Sum

from agentportal.models import Merchant, Role
from agentportal.principals import Principal
from approvals.bench.context import Bench
from approvals.bench.shop import BENCH_SUPERVISOR, BenchShop, bench_shop
from approvals.gate import services as approval_services
from approvals.gate.decision_request import DecisionRequest
from approvals.gate.policies import PolicyRules, policy_update
from approvals.models import Approval
from runs import worker
from runs.metrics import Counter
from runs.models import AgentRun, RunStatus

# Ticks the calibration may take to finish its runs (one does, unless slices run out).
CALIBRATION_TICKS = 10

KEYS = [
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


def calibrated(
    bench: Bench,
    message: str,
    measure: Callable[[BenchShop], dict],
    *,
    resume: Callable[[Merchant], None] | None = None,
    auto_approve_up_to: Decimal | None = None,
) -> dict:
    """`measure`'s figures on the bench shop, whose runs ask `message`, with the calibration's.
    `resume` carries the calibration's runs on where they wait (a decision, a plan), and
    refunds up to `auto_approve_up_to` need nobody."""
    shop = bench_shop(max(bench.runs, bench.calibration_runs), message)
    shop.clear()
    policy_update(
        merchant=shop.merchant,
        tool_name="issue_refund",
        rules=PolicyRules(amount_field="amount", auto_approve_up_to=auto_approve_up_to),
    )
    queries_per_step, commits_per_run = _calibrate(shop, bench.calibration_runs, resume)
    shop.clear()
    result = measure(shop)
    result.update(
        {
            "scenario": bench.scenario,
            "database": connection.vendor,
            "runs": bench.runs,
            "workers": bench.workers,
            "queries_per_step": round(queries_per_step, 2),
            "commits_per_run": round(commits_per_run, 2),
        }
    )
    return {key: result[key] for key in KEYS if key in result}


def _calibrate(
    shop: BenchShop, count: int, resume: Callable[[Merchant], None] | None
) -> tuple[float, float]:
    counter = Counter()
    with counter.counting():
        shop.queue(count)
        tick_queries_from = counter.queries
        _tick_while_busy(shop)
        tick_queries = counter.queries - tick_queries_from
        if resume is not None:
            resume(shop.merchant)
            resumed_from = counter.queries
            _tick_while_busy(shop)
            tick_queries += counter.queries - resumed_from
    done = AgentRun.objects.filter(merchant=shop.merchant, status=RunStatus.COMPLETED)
    if done.count() != count:
        raise CommandError(f"calibration: {done.count()} of {count} runs completed")
    steps = done.aggregate(steps=Sum("step"))["steps"]
    return tick_queries / steps, counter.commits / count


def _tick_while_busy(shop: BenchShop) -> None:
    """Tick until none of the shop's runs is queued or running: a slice that ends before its
    runs do (slow model calls on a busy machine) hands them back, to be claimed again."""
    busy = AgentRun.objects.filter(
        merchant=shop.merchant, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]
    )
    for _ in range(CALIBRATION_TICKS):
        worker.tick()
        if not busy.exists():
            return


def approvals_approve(merchant: Merchant) -> None:
    """The calibration's `resume` of runs waiting on a decision: the supervisor approves."""
    supervisor = User.objects.get(username=BENCH_SUPERVISOR)
    principal = Principal(merchant=merchant, role=Role.SUPERVISOR, user=supervisor)
    for approval in Approval.objects.filter(merchant=merchant).select_related("run"):
        approval_services.approval_decide(
            run=approval.run,
            principal=principal,
            request=DecisionRequest(interrupt_id=approval.interrupt_id, decision="approve"),
        )

"""`approval`: a refund each, run by `runportal` (web and workers) until it waits on a
decision; then 32 concurrent clients approve them over HTTP. Adds the decisions' rate and
latency to the throughput's figures."""

import json
import time

from django.contrib.auth.models import User
from django.core.management.base import CommandError

from agentportal.services import api_key_create
from approvals.bench.calibrated import approvals_approve, calibrated
from approvals.bench.context import Bench
from approvals.bench.measure import post_concurrently
from approvals.bench.processes import portal_stop
from approvals.bench.registry import Scenario, register
from approvals.bench.shop import BENCH_SUPERVISOR, REFUND, BenchShop
from approvals.bench.throughput import figures
from approvals.models import Approval, ApprovalStatus
from runs.models import FINISHED_STATUSES, AgentRun


def approval(bench: Bench) -> dict:
    return calibrated(bench, REFUND, lambda shop: _decisions(bench, shop), resume=approvals_approve)


def _decisions(bench: Bench, shop: BenchShop) -> dict:
    merchant = shop.merchant
    supervisor = User.objects.get(username=BENCH_SUPERVISOR)
    _, key = api_key_create(merchant=merchant, role="supervisor", user=supervisor)
    shop.queue(bench.runs)
    port, portal = bench.processes.portal(bench.workers)
    try:
        ends = time.monotonic() + bench.timeout
        waiting = Approval.objects.filter(merchant=merchant, status=ApprovalStatus.PENDING_APPROVAL)
        while waiting.count() < bench.runs:
            if time.monotonic() > ends or portal.poll() is not None:
                raise CommandError(f"only {waiting.count()} of {bench.runs} runs came to wait")
            time.sleep(0.1)
        decided = post_concurrently(
            f"http://127.0.0.1:{port}/api/v1",
            [
                (key, f"/approvals/{interrupt_id}/decision", {"decision": "approve"})
                for interrupt_id in waiting.values_list("interrupt_id", flat=True)
            ],
        )
        bench.say(f"decisions: {json.dumps(decided)}")
        pending = AgentRun.objects.filter(merchant=merchant).exclude(status__in=FINISHED_STATUSES)
        while pending.exists():
            if time.monotonic() > ends or portal.poll() is not None:
                raise CommandError(f"{pending.count()} runs unfinished after decisions")
            time.sleep(0.05)
    finally:
        portal_stop(portal)
    result = figures(merchant, bench.runs)
    result["decisions"] = decided
    return result


register(Scenario(name="approval", run=approval))

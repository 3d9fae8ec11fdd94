"""`auto_approval`: the `approval` scenario's refunds under a policy that approves them with
no person (refunds up to 10.00 need nobody); the throughput, end to end, as `plain`'s."""

from decimal import Decimal

from approvals.bench.calibrated import calibrated
from approvals.bench.context import Bench
from approvals.bench.registry import Scenario, register
from approvals.bench.shop import REFUND
from approvals.bench.throughput import repeated, throughput


def auto_approval(bench: Bench) -> dict:
    return calibrated(
        bench,
        REFUND,
        lambda shop: repeated(bench, lambda: throughput(bench, shop), shop),
        auto_approve_up_to=Decimal("10.00"),
    )


register(Scenario(name="auto_approval", run=auto_approval))

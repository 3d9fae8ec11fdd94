"""`plain`: customers ask about their orders (a tool call and an answer each); the throughput
of --runs runs through a cluster of --workers, --repeat times."""

from approvals.bench.calibrated import calibrated
from approvals.bench.context import Bench
from approvals.bench.registry import Scenario, register
from approvals.bench.shop import ORDER_STATUS
from approvals.bench.throughput import repeated, throughput


def plain(bench: Bench) -> dict:
    return calibrated(
        bench,
        ORDER_STATUS,
        lambda shop: repeated(bench, lambda: throughput(bench, shop), shop),
    )


register(Scenario(name="plain", run=plain))

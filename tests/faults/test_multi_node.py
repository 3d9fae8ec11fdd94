"""Two worker nodes and two web nodes on one database, as on four machines: runs queued through
both web nodes all complete, no shop ever runs more than its capacity, and when one worker node
is killed outright (its whole process tree) the other finishes everything with no tool run
twice. CI runs it on PostgreSQL, once through the database's queue and once through Redis."""

import json
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from runs.models import AgentRun, RunStatus, ToolExecution
from tests import factories
from tests.conftest import wait_for

pytestmark = pytest.mark.cluster

CAPACITIES = [2, 3, 4, 5, 6, 8, 10, 12, 16, 20]
RUNS = 1000
QUESTION = "What is the status of order {order}?"


class CapacitySampler(threading.Thread):
    """Samples the running runs per shop until stopped; the most each shop ever had."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most: dict[int, int] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                running = (
                    AgentRun.objects.filter(status=RunStatus.RUNNING)
                    .values_list("merchant")
                    .annotate(count=Count("pk"))
                    .order_by()
                )
                for merchant, count in running:
                    self.most[merchant] = max(self.most.get(merchant, 0), count)
                self.stopped.wait(0.02)
        finally:
            connection.close()


def _post(base: str, key: str, body: dict, idempotency_key: str) -> int:
    request = urllib.request.Request(
        f"{base}/api/v1/runs",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status


def _unfinished() -> str:
    """What the runs left unfinished look like, for the failure message."""
    runs = AgentRun.objects.exclude(status=RunStatus.COMPLETED).order_by("created_at")
    lines = [f"{runs.count()} runs unfinished; now {timezone.now().isoformat()}"]
    for run in runs[:20]:
        lines.append(
            f"{run.pk} shop={run.merchant_id} {run.status} node={run.next_node} step={run.step} "
            f"holder={run.lease_holder!r} lease={run.lease_expires_at} "
            f"updated={run.updated_at.isoformat()} error={run.error_code}"
        )
    return "\n".join(lines)


def test_two_worker_nodes_and_two_web_nodes_share_the_shops_and_survive_a_dead_node(
    cluster, web_server, stub
):
    if connection.vendor != "postgresql":
        pytest.skip("nodes on several machines share PostgreSQL; SQLite is the one-box default")
    # given ten shops of differing capacity, each with customers who have an order
    sends = []
    shops = []
    for index, capacity in enumerate(CAPACITIES):
        shop = factories.merchant_create(max_running_runs=capacity)
        shops.append(shop)
        key = factories.api_key_for(None, shop, "service")
        for number in range(RUNS // len(CAPACITIES) // 3 + 1):
            customer = factories.user_create(merchant=shop)
            order = f"ORD-{index}{number:03d}"
            factories.order_create(merchant=shop, customer=customer, number=order)
            sends += [(key, customer.username, order)] * 3
    sends = sends[:RUNS]

    # and a model that thinks for half a second, two web nodes and two worker nodes
    endpoint = stub(latency=0.5, text_only=False)
    env = {
        "AGENTPORTAL_MODEL": "openai",
        "OPENAI_BASE_URL": endpoint.base_url,
        "AGENTPORTAL_API_RATE": "100000/minute",
    }
    webs = [web_server(**env) for _ in range(2)]
    nodes = [cluster(workers=2, env=env) for _ in range(2)]
    sampler = CapacitySampler()
    sampler.start()

    # when the runs are queued through both web nodes, and one worker node is killed mid-load
    def send(item: tuple[int, tuple]) -> int:
        index, (key, account, order) = item
        body = {"message": QUESTION.format(order=order), "account": account}
        return _post(webs[index % 2], key, body, f"multi-node-{index}")

    with ThreadPoolExecutor(8) as clients:
        statuses = list(clients.map(send, enumerate(sends)))
    assert statuses == [201] * RUNS
    wait_for(lambda: AgentRun.objects.filter(status=RunStatus.COMPLETED).count() >= 100)
    nodes[0].kill()

    # then the other node finishes every run
    try:
        wait_for(
            lambda: AgentRun.objects.filter(status=RunStatus.COMPLETED).count() == RUNS,
            timeout=300,
            interval=0.5,
        )
    except AssertionError:
        raise AssertionError(_unfinished()) from None
    sampler.stopped.set()
    sampler.join()

    # and every shop ran as many at once as its capacity allows, and never more: none was
    # held below it while others ran
    assert {shop.slug: sampler.most.get(shop.pk, 0) for shop in shops} == {
        shop.slug: shop.max_running_runs for shop in shops
    }
    # and no tool ran twice for a run
    executions = ToolExecution.objects.values_list("run", "idempotency_key")
    assert len(set(executions)) == len(executions)
    per_run = (
        ToolExecution.objects.values("run")
        .annotate(count=Count("pk"))
        .order_by()
        .values_list("count", flat=True)
    )
    assert set(per_run) == {1}

"""A shop's running-run capacity holds under racing claims, on SQLite and PostgreSQL."""

import pytest

from runs.models import AgentRun, RunStatus
from tests import factories
from tests.runs import helpers
from tests.runs.test_worker_claim import customer_with_order, in_threads, queue

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("capacity", [1, 2])
def test_racing_claims_never_exceed_the_shops_capacity(capacity):
    # given: more queued runs than the shop may run at once
    shop = factories.merchant_create(max_running_runs=capacity)
    for index in range(6):
        number = f"ORD-7{index}"
        queue(customer_with_order(shop, number), shop, number)

    # when: eight workers claim at once
    leases = in_threads(lambda _: helpers.run_claim(), 8)

    # then
    assert sum(lease is not None for lease in leases) == capacity
    assert AgentRun.objects.filter(merchant=shop, status=RunStatus.RUNNING).count() == capacity

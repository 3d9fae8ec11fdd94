"""What a run costs the database: statements per graph step and commits per plain run."""

import pytest
from django.db import connection

from runs import services, worker
from runs.metrics import Counter
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.runs import helpers

MAX_QUERIES_PER_STEP = 12
MAX_COMMITS_PER_PLAIN_RUN = 6


def _old_runs(merchant, count: int) -> None:
    """Finished runs already in the database; they must not make a step dearer."""
    customer = factories.user_create(merchant=merchant)
    template = helpers.queue(customer, merchant, "PCL-1")
    AgentRun.objects.bulk_create(
        AgentRun(
            merchant=merchant,
            account=customer,
            status=RunStatus.COMPLETED,
            graph_version=template.graph_version,
            release_snapshot=template.release_snapshot,
            messages=template.messages,
        )
        for _ in range(count)
    )
    AgentRun.objects.filter(pk=template.pk).update(status=RunStatus.COMPLETED)


def _pat(shop):
    return shop.memberships.get(user__username="pat").user


@pytest.mark.parametrize("runs_already_there", [0, 500])
def test_each_step_of_a_plain_run_stays_within_the_query_budget(
    parcel_shop, django_assert_max_num_queries, runs_already_there
):
    # given
    _old_runs(parcel_shop, runs_already_there)
    helpers.queue(_pat(parcel_shop), parcel_shop, "PCL-1")

    # when / then: the claim and every step, one at a time
    with django_assert_max_num_queries(MAX_QUERIES_PER_STEP):
        lease = helpers.run_claim()
    steps = 0
    while lease.run.status == RunStatus.RUNNING:
        with django_assert_max_num_queries(MAX_QUERIES_PER_STEP):
            helpers.run_step(lease)
        steps += 1
    assert lease.run.status == RunStatus.COMPLETED
    assert steps == 3  # model, track_parcel, model


@pytest.mark.django_db(transaction=True)
def test_a_plain_run_commits_at_most_six_times(parcel_shop):
    # given
    pat = _pat(parcel_shop)
    counter = Counter()

    # when: accepted, woken, claimed and executed
    with counter.counting():
        run = helpers.queue(pat, parcel_shop, "PCL-1")
        worker.tick()

    # then
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert 3 <= counter.commits <= MAX_COMMITS_PER_PLAIN_RUN
    assert not connection.in_atomic_block


# A batch shares its claim and each round's transaction, events and attempts between its runs.
MAX_QUERIES_PER_BATCHED_STEP = 5


@pytest.mark.parametrize("runs_already_there", [0, 500])
def test_a_batch_of_runs_costs_fewer_statements_per_step(parcel_shop, runs_already_there):
    # given: six plain runs of six customers
    _old_runs(parcel_shop, runs_already_there)
    runs = []
    for index in range(6):
        number = f"PCL-6{index}"
        customer = helpers.customer_with_parcel(parcel_shop, number)
        runs.append(helpers.queue(customer, parcel_shop, number))
    counter = Counter()

    # when: claimed and executed together
    with counter.counting():
        leases = services.runs_claim(limit=6)
        worker.run_slices(leases)

    # then
    assert len(leases) == 6
    steps = sum(AgentRun.objects.get(pk=run.pk).step for run in runs)
    assert all(AgentRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED for run in runs)
    assert steps == 6 * 3
    assert counter.queries <= MAX_QUERIES_PER_BATCHED_STEP * steps

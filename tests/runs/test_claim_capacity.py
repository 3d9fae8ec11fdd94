"""A shop's running-run capacity holds under racing claims, on SQLite and PostgreSQL."""

import functools
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs import services, worker
from runs.metrics import Counter
from runs.models import AgentRun, RunStatus
from tests import threads
from tests.runs import helpers
from tests.runs.helpers import LOCKER_QUESTION, customer_with_parcel, queue, shop_create
from tests.threads import in_threads_numbered

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("capacity", [1, 2])
def test_racing_claims_never_exceed_the_shops_capacity(capacity):
    # given: more queued runs than the shop may run at once
    shop = shop_create(max_running_runs=capacity)
    for index in range(6):
        number = f"PCL-7{index}"
        queue(customer_with_parcel(shop, number), shop, number)

    # when: eight workers claim at once
    leases = in_threads_numbered(lambda _: helpers.run_claim(), 8)

    # then
    assert sum(lease is not None for lease in leases) == capacity
    assert AgentRun.objects.filter(merchant=shop, status=RunStatus.RUNNING).count() == capacity


def test_taking_over_an_expired_lease_replaces_the_run_it_does_not_add_one():
    # given a capacity-1 shop whose one running run's lease expired mid-step, and a queued run
    shop = shop_create(max_running_runs=1)
    stuck = queue(customer_with_parcel(shop, "PCL-81"), shop, "PCL-81")
    lease = helpers.run_claim()
    AgentRun.objects.filter(pk=stuck.pk).update(lease_expires_at=timezone.now())
    # (queued before it, as a run resumed after a person's answer can be)
    waiting = queue(customer_with_parcel(shop, "PCL-82"), shop, "PCL-82")
    AgentRun.objects.filter(pk=waiting.pk).update(created_at=stuck.created_at - timedelta(1))

    # when workers claim
    taken = helpers.run_claim()

    # then the expired run was taken over, and the queued one waits for the slot
    assert taken.run_id == lease.run_id == stuck.pk
    assert helpers.run_claim() is None
    assert AgentRun.objects.filter(merchant=shop, status=RunStatus.RUNNING).count() == 1


def test_a_capacity_1_shop_never_runs_two_while_leases_expire_mid_step(locker_latency):
    # given a capacity-1 shop with slow steps, and a chaos thread that expires leases while
    # workers are in them
    locker_latency(0.05)
    shop = shop_create(max_running_runs=1)
    for index in range(4):
        number = f"PCL-9{index}"
        queue(customer_with_parcel(shop, number), shop, number, LOCKER_QUESTION)
    deadline = time.monotonic() + 4
    samples = []

    def work(_):
        while time.monotonic() < deadline:
            worker.tick()

    def expire_leases():
        while time.monotonic() < deadline:
            AgentRun.objects.filter(merchant=shop, status=RunStatus.RUNNING).update(
                lease_expires_at=timezone.now() - timedelta(seconds=1)
            )
            # the queued runs older than the running one, as resumed runs can be
            AgentRun.objects.filter(merchant=shop, status=RunStatus.QUEUED).update(
                created_at=timezone.now() - timedelta(days=1)
            )
            time.sleep(0.03)

    def watch():
        while time.monotonic() < deadline:
            samples.append(AgentRun.objects.filter(merchant=shop, status=RunStatus.RUNNING).count())
            time.sleep(0.005)

    # when two workers run, leases expire under them and a sampler watches
    threads.in_threads(
        [functools.partial(work, 0), functools.partial(work, 1), expire_leases, watch]
    )

    # then two RUNNING rows never existed
    assert samples
    assert max(samples) <= 1


def _shops_with_queued_runs(shops: int, runs: int, capacity: int):
    merchants = [shop_create(max_running_runs=capacity) for _ in range(shops)]
    for merchant in merchants:
        for index in range(runs):
            number = f"PCL-{index + 1}"
            queue(customer_with_parcel(merchant, number), merchant, number)
    return merchants


def _running_by_shop(merchants) -> dict[int, int]:
    return {
        merchant.pk: AgentRun.objects.filter(merchant=merchant, status=RunStatus.RUNNING).count()
        for merchant in merchants
    }


def test_a_claim_over_more_shops_than_one_round_shares_the_room_evenly_in_few_commits():
    # given: twelve shops (more than one round's CLAIM_SHOPS) with five queued runs each
    merchants = _shops_with_queued_runs(12, runs=5, capacity=4)
    counter = Counter()

    # when: one claim with room for 30 runs
    with counter.counting():
        leases = services.runs_claim(limit=30)

    # then: every shop got two or three, within its capacity, each round in one commit
    running = _running_by_shop(merchants)
    assert len(leases) == 30 == sum(running.values())
    assert set(running.values()) == {2, 3}
    assert counter.commits <= 3


@pytest.mark.parametrize("capacity", [1, 3])
def test_racing_claims_over_many_shops_never_exceed_any_shops_capacity(capacity):
    # given: ten shops with more queued runs than they may run at once
    merchants = _shops_with_queued_runs(10, runs=4, capacity=capacity)

    # when: six workers claim groups of seven at once, twice over
    def claims(_index: int) -> int:
        return sum(len(services.runs_claim(limit=7)) for _ in range(2))

    claimed = in_threads_numbered(claims, 6)

    # then: every shop is full, none over, and each run was claimed once
    running = _running_by_shop(merchants)
    assert set(running.values()) == {capacity}
    assert sum(claimed) == 10 * capacity
    assert not AgentRun.objects.filter(merchant__in=merchants, lease_token__gt=1).exists()


def test_a_worker_process_takes_only_its_share_of_a_shop_and_leaves_the_rest_to_the_others():
    # given: a shop of capacity 5 with more queued runs, and two worker processes
    [merchant] = _shops_with_queued_runs(1, runs=8, capacity=5)

    # when: this process claims, twice
    first = services.runs_claim(limit=8, processes=2)
    again = services.runs_claim(limit=8, processes=2)

    # then: it holds its share (5 over 2, rounded up) and no more
    assert (len(first), again) == (3, [])
    assert _running_by_shop([merchant]) == {merchant.pk: 3}

    # when: its runs were another process's, this one's claim takes what the shop has left
    AgentRun.objects.filter(pk__in=[lease.run_id for lease in first]).update(
        lease_holder="process:elsewhere:1"
    )
    other = services.runs_claim(limit=8, processes=2)

    # then: the shop is full, never over
    assert len(other) == 2
    assert _running_by_shop([merchant]) == {merchant.pk: 5}


def test_claims_over_more_shops_than_one_round_deal_every_shop_the_same_over_time():
    # given: twenty shops (three rounds of CLAIM_SHOPS) with more queued runs than are claimed
    merchants = _shops_with_queued_runs(20, runs=14, capacity=50)
    claimed = dict.fromkeys((merchant.pk for merchant in merchants), 0)

    # when: ten claims with room for 24 runs, each claim's runs finished before the next
    for _ in range(10):
        for lease in services.runs_claim(limit=24):
            claimed[lease.run.merchant_id] += 1
        AgentRun.objects.filter(status=RunStatus.RUNNING).update(status=RunStatus.COMPLETED)

    # then: the one run over the even share went round all the shops, not the first round's
    assert sorted(claimed.values()) == [12] * 20

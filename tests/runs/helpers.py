"""Driving the worker one run and one step at a time, as tests need it (production claims and
commits in batches: runs.services.runs_claim, runs_step_commit and runs.worker.run_slices),
and reading what a run's timeline says."""

import asyncio
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.models import Merchant
from runs import services, worker
from runs.models import AgentRun, ModelAttempt, RunEvent, RunStatus
from runs.services import Lease, StepCommit
from tests import factories
from tests.extension_app import parcels
from tests.extension_app.models import Parcel

STATUS_QUESTION = "Where is my parcel {parcel}?"
LOCKER_QUESTION = "Is there a locker for parcel {parcel}?"


def shop_create(**fields) -> Merchant:
    """A new shop whose agent tracks parcels (tests/extension_app/parcels.py): the runtime's
    tests need nothing of the after-sales demo."""
    shop = factories.merchant_create(**fields)
    factories.release_publish(
        merchant=shop, model=f"scripted:{parcels.SCRIPT}", tools=parcels.TOOLS
    )
    return shop


def customer_with_parcel(merchant: Merchant, number: str, username: str | None = None) -> User:
    """A new customer of the shop, with a parcel of that number on its way."""
    customer = factories.user_create(username, merchant=merchant)
    Parcel.objects.create(merchant=merchant, customer=customer, number=number)
    return customer


def queue(customer: User, merchant: Merchant, parcel: str, question: str = STATUS_QUESTION):
    """The customer's question about `parcel` (a template naming {parcel}), queued."""
    return factories.run_queue(
        customer=customer, merchant=merchant, message=question.format(parcel=parcel)
    )


def run_claim() -> Lease | None:
    """Claim the next run fairly and take its lease; None when nothing is claimable."""
    leases = services.runs_claim(limit=1)
    return leases[0] if leases else None


def run_step(lease: Lease) -> AgentRun:
    """Execute the node the run is at and commit its outcome, on its own.

    Raises what stopped it instead of handling it: LostRun or AccessRevoked when the worker
    no longer holds the run.
    """
    entry = worker._RunInBatch(lease, worker._step(lease), handle_stops=False)
    worker._batch_execute([entry], ends=math.inf)
    if entry.error is not None:
        raise entry.error
    return entry.result


def run_step_commit(*, lease: Lease, commit: StepCommit) -> AgentRun:
    """Commit a step's effects and the next node in one transaction; return the run.

    Raises LostRun or AccessRevoked, with nothing committed, when the worker lost the run.
    """
    [outcome] = services.runs_step_commit([(lease, commit)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def expire_lease(run_id) -> None:
    """The run's lease ran out a second ago: its holder is stale from now on."""
    AgentRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def attempts(run_id) -> list[tuple[int, int, str]]:
    """The run's model attempts: (step, attempt, status), in order."""
    return list(
        ModelAttempt.objects.filter(run_id=run_id)
        .order_by("step", "attempt")
        .values_list("step", "attempt", "status")
    )


# --- the run's timeline --------------------------------------------------------------------


def events(run_id) -> list[tuple[int, str]]:
    return list(RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type"))


def types(run_id) -> list[str]:
    return [event_type for _, event_type in events(run_id)]


def tool_started(run_id, tool: str) -> Callable[[], bool]:
    """A condition: the run's worker has started calling `tool`."""
    return lambda: RunEvent.objects.filter(
        run_id=run_id, type="tool.started", data__tool=tool
    ).exists()


def assert_timeline_contiguous(run_id) -> None:
    seqs = [seq for seq, _ in events(run_id)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert AgentRun.objects.get(pk=run_id).last_event_seq == len(seqs)


def assert_completed_once(run_id) -> None:
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert types(run_id).count("run.completed") == 1
    assert types(run_id)[-1] == "run.completed"
    assert_timeline_contiguous(run_id)


class RecordingChannel:
    """A delta channel that keeps what it is given to publish, and sends at once."""

    broadcast = True

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.statements: list[list[dict[str, Any]]] = []

    def publish_soon(self, messages: list[dict[str, Any]]) -> asyncio.Future:
        self.statements.append(messages)
        self.published.extend(messages)
        sent = asyncio.get_running_loop().create_future()
        sent.set_result(None)
        return sent

    def publish_in_transaction(self, message: dict[str, Any]) -> None:
        self.published.append(message)

"""What a worker holds while it executes a run, and what it learns when it no longer does."""

import math
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from runs.models import AgentRun
from runs.services.statements import held_by, held_by_row


@dataclass
class Lease:
    """What a worker holds while it executes a run. `run` is the worker's copy of the row:
    while the lease is valid nobody else changes it, and every commit checks that."""

    run_id: Any
    token: int
    control_version: int
    attempt_id: int | None = None
    attempt_no: int = 0
    run: AgentRun | None = field(default=None, repr=False)
    # time.monotonic() at which the worker's slice ends: the step committed after it hands
    # the run back to the queue.
    slice_ends: float = math.inf
    # The step whose tool calls this lease's holder got from the model itself: none of them
    # can have a result yet, so nothing needs looking up.
    fresh_turn: int | None = None

    def slice_spent(self) -> bool:
        return time.monotonic() >= self.slice_ends


class LostRun(Exception):
    """The worker no longer holds the run (cancelled, expired lease, taken over, finished)."""


class AccessRevoked(Exception):
    """The run's merchant was deactivated or its account lost its membership."""


def lease_expires_at(now: datetime) -> datetime:
    """When a lease taken or renewed at `now` runs out."""
    return now + timedelta(seconds=settings.AGENTPORTAL["LEASE_SECONDS"])


def why_lost(lease: Lease) -> LostRun | AccessRevoked:
    """Why a worker's guarded UPDATE matched nothing: it lost the run (no longer held_by it,
    or changed since it last wrote it), or the run's shop or account lost access."""
    now = timezone.now()
    held = AgentRun.objects.filter(held_by(lease, now), version=lease.run.version).exists()
    if not held:
        return LostRun(f"run {lease.run_id} is no longer held by this lease")
    return AccessRevoked(f"run {lease.run_id}: merchant inactive or membership revoked")


def lease_holds(run: AgentRun, lease: Lease) -> bool:
    """Whether the worker holding `lease` still holds `run`, a row the caller locked and
    loaded: what a side effect committed outside a step must prove first."""
    return held_by_row(run, lease, timezone.now())


def process_name() -> str:
    """This process as a lease holder and in its heartbeat. Read each time: worker processes
    are forked after this module loads."""
    return f"process:{socket.gethostname()}:{os.getpid()}"

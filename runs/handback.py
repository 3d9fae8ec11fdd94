"""Runs a worker process hands back to the queue because it cannot execute them, kept until the
database takes them: when the database went away, they are handed back as soon as it answers
again rather than when their leases expire (two minutes later)."""

import logging
import time

from django.db import DatabaseError, close_old_connections

from runs import services
from runs.services import Lease

logger = logging.getLogger(__name__)

RETRY_SECONDS = 0.5
# How long a worker that is done with its runs waits for the database to take them back; past
# that their leases expire and another worker takes them over anyway.
WAIT_SECONDS = 30.0

_kept: list[Lease] = []
_failing = False


def hand_back(leases: list[Lease]) -> None:
    """Hand runs back to the queue now, or keep them to hand back once the database answers."""
    _kept.extend(leases)
    retry()


def retry() -> bool:
    """Try again to hand back the runs kept; True when none is left."""
    global _failing
    if not _kept:
        return True
    close_old_connections()  # a connection the outage broke is replaced
    try:
        services.runs_release(list(_kept))
    except DatabaseError as error:
        if not _failing:
            logger.warning("cannot hand back %d runs yet (%s); trying again", len(_kept), error)
        _failing = True
        return False
    if _failing:
        logger.warning("the database answers again: %d runs handed back", len(_kept))
    _failing = False
    _kept.clear()
    return True


def retry_until(deadline: float) -> None:
    """Try again until the runs kept are handed back or the deadline (time.monotonic())."""
    while not retry() and time.monotonic() < deadline:
        time.sleep(RETRY_SECONDS)

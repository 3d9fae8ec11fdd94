"""Accepting runs: waking workers, idempotency replays, releases, the open-run limit, inserting
a QUEUED run."""

import hashlib
import json
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import ValidationError

from agentportal import errors
from agentportal.models import Membership, Merchant
from runs import locks
from runs.models import ACTIVE_STATUSES, AgentRelease, AgentRun, RunEvent
from runs.releases import (
    GRAPH_RELEASES,
    ReleaseManifest,
    default_manifest,
    graph_release_default,
)

logger = logging.getLogger(__name__)


def tick_enqueue(count: int = 1) -> None:
    """Wake workers once the current transaction commits.

    The message is only a wake-up: a tick drains every claimable run. So while enough wake-ups
    wait unclaimed in the broker (one per worker), another one would add nothing.
    """

    def send() -> None:
        from django_q.brokers import get_broker
        from django_q.tasks import async_task

        waiting = get_broker().queue_size() or 0
        for _ in range(min(count, settings.Q_CLUSTER["workers"] - waiting)):
            async_task("runs.tasks.tick")

    # A broker that is down must not turn a committed change into an error for its caller:
    # the run is in the database, and maintain wakes the workers later.
    transaction.on_commit(send, robust=True)


def request_hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def release_resolve(*, merchant: Merchant) -> dict[str, Any]:
    """The release a new run copies: the merchant's published one, or the defaults."""
    release = AgentRelease.objects.filter(merchant=merchant, published=True).first()
    if release is None:
        return {
            "version": None,
            "graph_version": graph_release_default().version,
            "manifest": default_manifest().model_dump(),
        }
    try:
        manifest = ReleaseManifest.model_validate(release.manifest)
    except ValidationError as error:
        logger.error("release %s of %s is invalid: %s", release.version, merchant.slug, error)
        raise errors.InvalidTransition(
            "This shop's published agent release is invalid; an operator must fix it.",
        ) from error
    return {
        "version": release.version,
        "graph_version": release.graph_version,
        "manifest": manifest.model_dump(),
    }


def release_save(*, release: AgentRelease) -> AgentRelease:
    """Save a release; publishing it unpublishes the merchant's previous one. New runs copy
    the published release; runs already queued keep theirs."""
    with transaction.atomic():
        locks.merchant_lock(release.merchant_id)
        if release.published:
            AgentRelease.objects.filter(merchant_id=release.merchant_id, published=True).exclude(
                pk=release.pk
            ).update(published=False)
        release.save()
    return release


def _replay(*, scope: str, key: str, payload_hash: str) -> AgentRun | None:
    """The run an earlier request with this Idempotency-Key created; IdempotencyKeyReused for
    another body."""
    run = AgentRun.objects.filter(idempotency_scope=scope, idempotency_key=key).first()
    if run is not None and run.request_hash != payload_hash:
        raise errors.IdempotencyKeyReused(
            "This Idempotency-Key was used for another request body.",
        )
    return run


def queue_run(
    *,
    merchant: Merchant,
    account,
    messages: list[dict[str, Any]],
    idempotency_scope: str = "",
    idempotency_key: str | None = None,
    payload_hash: str = "",
) -> tuple[AgentRun, bool]:
    """Accept a standalone run; return it and whether it was created (False: a replay).

    A replay is answered before any limit is counted; the caller re-checks that the principal
    may still see the run. The open-run limit is counted under the account's Membership lock so
    that racing requests cannot both pass it.
    """
    if idempotency_key is not None:
        existing = _replay(scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash)
        if existing is not None:
            return existing, False
    release = release_resolve(merchant=merchant)
    try:
        with transaction.atomic():
            membership_lock(merchant=merchant, account=account)
            if idempotency_key is not None:
                existing = _replay(
                    scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash
                )
                if existing is not None:
                    return existing, False
            open_runs_check(merchant=merchant, account=account)
            run = run_insert_locked(
                merchant=merchant,
                account=account,
                messages=messages,
                release=release,
                idempotency_scope=idempotency_scope,
                idempotency_key=idempotency_key,
                payload_hash=payload_hash,
            )
    except IntegrityError:
        # A concurrent request with the same key won the insert.
        existing = _replay(scope=idempotency_scope, key=idempotency_key, payload_hash=payload_hash)
        if existing is None:
            raise errors.IdempotencyKeyInFlight(
                "A request with this Idempotency-Key is being processed; retry shortly.",
            ) from None
        return existing, False
    return run, True


def membership_lock(*, merchant: Merchant, account) -> Membership:
    """Lock the account's membership (after its Merchant in the lock order); NotAllowed when
    it has none."""
    membership = locks.membership_lock(merchant=merchant, account=account)
    if membership is None:
        raise errors.NotAllowed("The account is not a member of this shop.")
    return membership


def open_runs_check(*, merchant: Merchant, account) -> None:
    """TooManyOpenRuns when the account has its limit of unfinished runs. Call holding its
    Membership lock, so that racing requests cannot both pass."""
    open_runs = AgentRun.objects.filter(
        merchant=merchant, account=account, status__in=ACTIVE_STATUSES
    ).count()
    if open_runs >= settings.AGENTPORTAL["MAX_OPEN_RUNS_PER_ACCOUNT"]:
        raise errors.TooManyOpenRuns(
            f"This account already has {open_runs} unfinished runs; wait for one to end.",
        )


def _system_prompt(release: dict[str, Any]) -> str:
    graph = GRAPH_RELEASES[release["graph_version"]]
    return release["manifest"]["system_prompt"] or graph.system_prompt


def run_insert_locked(
    *,
    merchant: Merchant,
    account,
    messages: list[dict[str, Any]],
    release: dict[str, Any],
    conversation=None,
    idempotency_scope: str = "",
    idempotency_key: str | None = None,
    payload_hash: str = "",
) -> AgentRun:
    """Store a QUEUED run with its release and deadline, and wake a worker on commit.

    Call inside a transaction, after the open-run limit was checked.
    """
    if release["graph_version"] not in GRAPH_RELEASES:
        raise errors.InvalidTransition(
            f"Graph version {release['graph_version']} is not registered in this build.",
        )
    limits = release["manifest"]["limits"]
    run = AgentRun(
        merchant=merchant,
        account=account,
        conversation=conversation,
        control_version=conversation.control_version if conversation else 1,
        messages=[{"role": "system", "content": _system_prompt(release)}, *messages],
        graph_version=release["graph_version"],
        release_snapshot=release,
        deadline_at=timezone.now() + timedelta(seconds=limits["run_deadline_seconds"]),
        idempotency_scope=idempotency_scope,
        idempotency_key=idempotency_key,
        request_hash=payload_hash,
        last_event_seq=1,
    )
    run.save(force_insert=True)
    RunEvent.objects.create(
        run=run, seq=1, type="run.queued", data={"graph_version": run.graph_version}
    )
    tick_enqueue()
    return run

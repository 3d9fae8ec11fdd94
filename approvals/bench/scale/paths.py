"""The hot paths the scale scenario times, each called as the product calls it, in this
process: the median of `repeat` runs after one unmeasured run. Paths that write (the claim, a
prune batch) run in a transaction rolled back, so every repeat and every size finds the same
work."""

import statistics
import time
from collections.abc import Callable
from datetime import timedelta

from django.core.management.base import CommandError
from django.db import transaction
from django.test import Client
from django.utils import timezone

from approvals import plans
from approvals.bench.scale.seed import CLAIMABLE, Scale
from approvals.portal.live import Topic, page_states
from runs import selectors
from runs.serializers import RunEventSerializer
from runs.services.retention import runs_prune_batch
from runs.services.scheduling import runs_claim

PRUNE_AGE = timedelta(days=90)
PRUNE_BATCH = 500  # prune's default --batch-size
LIVE_PAGES = 20  # approval pages open beside the inbox


def paths_timed(scale: Scale, repeat: int) -> dict[str, float]:
    supervisor = Client(secure=True)
    supervisor.force_login(scale.supervisor)
    api = Client(secure=True, headers={"Authorization": f"Bearer {scale.api_key}"})
    approval = scale.pending[0]
    # The inbox page lists the oldest calls first, the API the newest.
    shown, newest = approval.interrupt_id, scale.pending[-1].interrupt_id
    topics = [Topic("inbox", str(scale.supervisor.pk))] + [
        Topic("approval", str(call.pk)) for call in scale.pending[:LIVE_PAGES]
    ]
    # The streams' cursors one event short of each run's last: every read finds news.
    cursors = {call.run_id: max(0, call.run.last_event_seq - 1) for call in scale.pending}

    def page(client: Client, path: str, shows: str) -> Callable[[], None]:
        def get() -> None:
            response = client.get(path)
            if response.status_code != 200 or shows not in response.content.decode():
                raise CommandError(f"GET {path} answered {response.status_code} without {shows}")

        return get

    def claim() -> None:
        with transaction.atomic():
            if len(runs_claim(limit=10)) != min(10, CLAIMABLE):
                raise CommandError("the claim did not find the queued runs")
            transaction.set_rollback(True)

    def streams() -> None:
        for events, _finished in selectors.runs_events_since(cursors).values():
            RunEventSerializer(events, many=True).data  # noqa: B018 (as the streams send them)

    def prune() -> None:
        with transaction.atomic():
            batch = runs_prune_batch(
                finished_before=timezone.now() - PRUNE_AGE, batch_size=PRUNE_BATCH
            )
            if batch.runs == 0:
                raise CommandError("prune found no runs old enough")
            transaction.set_rollback(True)

    paths: dict[str, Callable[[], object]] = {
        "claim": claim,
        "inbox_portal": page(supervisor, "/portal/", shown),
        "inbox_api": page(api, "/api/v1/approvals?status=PENDING_APPROVAL", newest),
        "run_page_portal": page(supervisor, f"/portal/approvals/{shown}/", shown),
        "run_api": page(api, f"/api/v1/runs/{approval.run_id}", str(approval.run_id)),
        "live_pages": lambda: page_states(topics),
        "run_streams": streams,
        "reconcile": plans.plans_reconcile_due,
        "prune_batch": prune,
    }
    return {name: _median_ms(path, repeat) for name, path in paths.items()}


def _median_ms(path: Callable[[], object], repeat: int) -> float:
    path()  # once unmeasured: imports, caches, prepared statements
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        path()
        timings.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(timings), 1)

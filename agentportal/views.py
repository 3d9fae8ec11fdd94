from datetime import timedelta

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views import defaults

from agentportal.problems import api_not_found, api_server_error

WORKER_FRESH = timedelta(seconds=90)  # maintain beats once a minute, give or take 30 s
PROCESS_FRESH = timedelta(seconds=10)  # a process executing runs reports every 2 s


def healthz(request: HttpRequest) -> JsonResponse:
    """Whether the portal can serve: the database, the worker's beat, the queue. Anyone (a
    proxy, a probe) gets those and a coarse reason; which shops stall and which processes run
    where are for a signed-in superuser (and /metrics), not for whoever can reach the node."""
    from runs.models import WorkerHeartbeat
    from runs.selectors import queues_stalled

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return JsonResponse({"database": "down", "worker": "unknown"}, status=503)
    now = timezone.now()
    beat = WorkerHeartbeat.objects.filter(name="worker").first()
    stalled = queues_stalled(now)
    body = {
        "database": "ok",
        "worker": "ok" if beat and now - beat.seen_at < WORKER_FRESH else "stale",
        "queue": "stalled" if stalled else "ok",
    }
    if stalled:
        body["reason"] = (
            "Runs have waited over a minute in a shop with room and no worker took one: are "
            "the workers running?"
        )
    if request.user.is_authenticated and request.user.is_superuser:
        # Each worker process executing runs now: what it holds, and its model endpoints'
        # queues; and the shops whose queue stalled.
        processes = WorkerHeartbeat.objects.filter(
            name__startswith="process:", seen_at__gte=now - PROCESS_FRESH
        ).order_by("name")
        body["worker_processes"] = [{"name": p.name, **p.report} for p in processes]
        body["stalled_shops"] = stalled
    return JsonResponse(body, status=503 if stalled else 200)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return defaults.server_error(request)

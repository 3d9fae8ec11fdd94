from datetime import timedelta

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views import defaults

from agentportal.problems import api_not_found, api_server_error

WORKER_FRESH = timedelta(seconds=90)  # maintain beats once a minute, give or take 30 s
PROCESS_FRESH = timedelta(seconds=10)  # a process executing runs reports every 2 s


def healthz(request: HttpRequest) -> JsonResponse:
    from runs.models import WorkerHeartbeat
    from runs.selectors import queues_stalled

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database = "ok"
    except Exception:
        return JsonResponse({"database": "down", "worker": "unknown"}, status=503)
    now = timezone.now()
    beat = WorkerHeartbeat.objects.filter(name="worker").first()
    worker = "ok" if beat and now - beat.seen_at < WORKER_FRESH else "stale"
    # Each worker process executing runs now: what it holds, and its model endpoints' queues.
    processes = WorkerHeartbeat.objects.filter(
        name__startswith="process:", seen_at__gte=now - PROCESS_FRESH
    ).order_by("name")
    stalled = queues_stalled(now)
    body = {
        "database": database,
        "worker": worker,
        "worker_processes": [{"name": p.name, **p.report} for p in processes],
    }
    if stalled:
        body["queue"] = "stalled"
        body["reason"] = (
            f"Runs have waited over a minute in {len(stalled)} shop(s) with room "
            f"({', '.join(stalled[:5])}) and no worker took one: are the workers running?"
        )
        return JsonResponse(body, status=503)
    body["queue"] = "ok"
    return JsonResponse(body)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return defaults.server_error(request)

from datetime import timedelta

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views import defaults

from agentportal.problems import api_not_found, api_server_error

WORKER_FRESH = timedelta(seconds=90)  # maintain beats once a minute, give or take 30 s


def healthz(request: HttpRequest) -> JsonResponse:
    from runs.models import WorkerHeartbeat

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database = "ok"
    except Exception:
        return JsonResponse({"database": "down", "worker": "unknown"}, status=503)
    beat = WorkerHeartbeat.objects.filter(name="worker").first()
    worker = "ok" if beat and timezone.now() - beat.seen_at < WORKER_FRESH else "stale"
    return JsonResponse({"database": database, "worker": worker})


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return defaults.server_error(request)

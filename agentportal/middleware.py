"""Hostile requests are refused before any view reads them: a problem for the API, a plain 400
or 413 page for the pages, never a 500. A database that is away is a 503 to be retried, not a
500."""

from django.conf import settings
from django.http import HttpResponse, HttpResponseBadRequest

from agentportal.problems import (
    DATABASE_AWAY,
    RETRY_AFTER_DATABASE_AWAY,
    RETRY_AFTER_POOL_BUSY,
    database_away_response,
    pool_busy,
    problem_response,
)


class HostileInputMiddleware:
    """NUL characters in the path or the query (PostgreSQL refuses them in text) and bodies
    larger than DATA_UPLOAD_MAX_MEMORY_SIZE."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        query = (text for name, values in request.GET.lists() for text in (name, *values))
        if "\x00" in request.path or any("\x00" in text for text in query):
            return self._refuse(request, 400, "validation_error", "NUL characters are not allowed.")
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return self._refuse(
                request,
                413,
                "payload_too_large",
                f"The body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
            )
        return self.get_response(request)

    @staticmethod
    def _refuse(request, status: int, code: str, detail: str) -> HttpResponse:
        if request.path.startswith("/api/"):
            return problem_response(request, status, code, detail)
        if status == 400:
            return HttpResponseBadRequest(detail)
        return HttpResponse(detail, status=status, content_type="text/plain")


class DatabaseAwayMiddleware:
    """A page or API request that met a database that cannot be reached is answered 503 with
    Retry-After (a problem for the API), never a 500 with a traceback in the log."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, DATABASE_AWAY):
            return None
        if request.path.startswith("/api/"):
            return database_away_response(request, exception)
        if pool_busy(exception):
            text = "The portal is busy just now. Try again in a second."
            retry_after = RETRY_AFTER_POOL_BUSY
        else:
            text = "The portal cannot reach its database just now. Try again in a few seconds."
            retry_after = RETRY_AFTER_DATABASE_AWAY
        response = HttpResponse(text, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(retry_after)
        return response

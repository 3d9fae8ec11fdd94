"""Hostile requests are refused before any view reads them: a problem for the API, a plain 400
or 413 page for the pages, never a 500."""

from django.conf import settings
from django.http import HttpResponse, HttpResponseBadRequest

from agentportal.problems import problem_response


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

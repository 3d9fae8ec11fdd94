"""/metrics for Prometheus: off unless AGENTPORTAL_METRICS_TOKEN is set, and then answered only
to `Authorization: Bearer <that token>`. Every figure is read from the database at the scrape,
so any web node answers for the whole cluster."""

import hmac

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def metrics(request: HttpRequest) -> HttpResponse:
    from approvals.monitoring import ApprovalsCollector
    from runs.monitoring import RunsCollector

    token = settings.AGENTPORTAL["METRICS_TOKEN"]
    if not token:
        raise Http404("Metrics are off.")
    sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not hmac.compare_digest(sent.encode(), token.encode()):
        response = HttpResponse("A bearer token is needed.", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunsCollector())
    registry.register(ApprovalsCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

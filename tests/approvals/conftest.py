"""Fixtures shared by the approvals' tests."""

import pytest

from tests.approvals.approval_api_helpers import DECISION, RESUME, Endpoint
from tests.approvals.webhook_helpers import SECRET, Receiver


@pytest.fixture
def allow_private(settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "WEBHOOK_ALLOW_PRIVATE": True}


@pytest.fixture
def receiver(demo, allow_private):
    """receiver(*statuses) -> the demo shop's webhook endpoint, answering with those
    statuses, then 204; stopped after the test."""
    made = []

    def start(*statuses):
        hook = Receiver(statuses)
        made.append(hook)
        demo.webhook_url, demo.webhook_secret = hook.url, SECRET
        demo.save()
        return hook

    yield start
    for hook in made:
        hook.close()


@pytest.fixture(params=[RESUME, DECISION], ids=lambda e: e.name)
def endpoint(request) -> Endpoint:
    return request.param

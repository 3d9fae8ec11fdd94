"""A new call's emails cost the pause's transaction one statement per supervisor (the email
itself) and no more: its decision links are written together."""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentportal.models import Role
from approvals.models import DecisionLink
from runs import worker
from runs.models import RunStatus
from tests import factories


def pause_statements(shop, customer: str, order: str) -> int:
    """The statements of the tick that takes a customer's refund to its pause."""
    run = factories.run_queue(
        customer=User.objects.get(username=customer),
        merchant=shop,
        message=f"I want a refund for {order} amount 20",
    )
    with CaptureQueriesContext(connection) as statements:
        worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL, (run.status, run.error_detail)
    return len(statements.captured_queries)


@pytest.mark.django_db
def test_ten_more_supervisors_cost_ten_more_statements(demo):
    # given the demo's two supervisors, a first pause
    two = pause_statements(demo, "alice", "ORD-1003")

    # when ten more supervisors with addresses join and another call pauses
    for number in range(10):
        factories.user_create(f"extra{number}", merchant=demo, role=Role.SUPERVISOR)
    User.objects.filter(username__startswith="extra").update(email="extra@example.com")
    twelve = pause_statements(demo, "bob", "ORD-2001")

    # then the pause grew by their ten emails, and each got its two links
    assert twelve - two == 10
    assert DecisionLink.objects.filter(user__username__startswith="extra").count() == 20

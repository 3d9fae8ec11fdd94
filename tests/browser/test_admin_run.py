"""A supervisor reads a run in the admin, in a real browser: its timeline, its model attempts
and its tool executions, as an operator does."""

import pytest
from django.contrib.auth.models import User

from runs import worker
from runs.models import AgentRun
from tests import factories
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_supervisor_sees_a_runs_timeline_attempts_and_tools_in_the_admin(
    demo, signed_in, live_server
):
    # given a run of the shop that looked an order up and answered
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message="What is the status of order ORD-1001?"
    )
    worker.tick()
    run = AgentRun.objects.get(pk=run.pk)
    assert run.status == "COMPLETED"

    # when sam, a supervisor but no superuser, opens it in the admin
    sam = signed_in("sam")
    sam.goto(f"{live_server.url}/admin/runs/agentrun/{run.pk}/change/")
    screenshot(sam, "admin-run-supervisor")

    # then the page says whose it is, and its three histories are there with what happened
    assert sam.inner_text("#site-name") == "Agent Portal administration"
    assert sam.title().endswith("| Agent Portal")
    headings = sam.locator(".inline-group h2").all_inner_texts()
    assert [h.lower() for h in headings] == ["timeline", "model attempts", "tool executions"]
    timeline = sam.inner_text(".inline-group >> nth=0")
    assert "run.queued" in timeline and "run.completed" in timeline
    # in words, to the second
    assert "The model asked to call lookup_order" in timeline
    assert "lookup_order succeeded: " in timeline and "order id ORD-1001" in timeline
    assert run.created_at.strftime("%Y-%m-%d %H:%M:") in timeline
    assert "lookup_order" in sam.inner_text(".inline-group >> nth=2")

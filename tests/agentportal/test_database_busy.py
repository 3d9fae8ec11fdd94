"""A pool whose connections are all in use is not a database that is away: the web server
answers 503 with a short Retry-After and says it is busy, never that it cannot reach its
database."""

import json
import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction

from agentportal.models import Merchant
from tests import factories, http
from tests.conftest import wait_for

pytestmark = pytest.mark.usefixtures("demo")


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def test_a_request_that_finds_every_pooled_connection_in_use_is_told_the_service_is_busy(
    web_server,
):
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL's web processes take connections from a pool")
    key = factories.api_key_for(
        User.objects.get(username="sam"), Merchant.objects.get(slug="demo-shop")
    )
    # given a web server with one pooled connection, held by a request that waits on a lock
    base = web_server(AGENTPORTAL_WEB_DB_POOL="1")
    first: list[http.Answer] = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("LOCK TABLE agentportal_apikey IN ACCESS EXCLUSIVE MODE")
        holder = threading.Thread(
            target=lambda: first.append(http.get(base, "/api/v1/runs", key=key))
        )
        holder.start()
        wait_for(_waiting_on_a_lock, timeout=20)

        # when another request asks for a connection, and a page too
        busy = http.get(base, "/api/v1/runs", key=key)
        page = http.get(base, "/portal/", Cookie="sessionid=anything")

    # then it is told the service is busy, to come back in a second, and the first one is
    # answered once the lock is gone
    holder.join(timeout=30)
    assert busy.status == 503
    assert busy.headers["retry-after"] == "1"
    problem = json.loads(busy.body)
    assert problem["code"] == "service_unavailable"
    assert "busy" in problem["detail"]
    assert "database" not in problem["detail"]
    assert [answer.status for answer in first] == [200]
    assert (page.status, page.headers["retry-after"]) == (503, "1")
    assert "busy" in page.body
    assert "database" not in page.body

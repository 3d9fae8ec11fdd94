"""While the database cannot be reached, the real web server answers 503 with Retry-After (a
problem for the API), never a 500."""

import json

import pytest
from django.db import connection

from tests import http

pytestmark = pytest.mark.usefixtures("demo")


def _unreachable() -> str:
    if connection.vendor == "postgresql":
        return "postgres://postgres:postgres@127.0.0.1:1/agentportal"  # nothing listens there
    return "sqlite:////nonexistent-directory/db.sqlite3"


def test_the_api_answers_503_service_unavailable_while_the_database_is_away(web_server):
    base = web_server(DATABASE_URL=_unreachable())

    answer = http.get(base, "/api/v1/runs", key="ap_0000_anything", timeout=20)

    assert answer.status == 503
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.headers["retry-after"] == "5"
    problem = json.loads(answer.body)
    assert problem["code"] == "service_unavailable"
    assert problem["status"] == 503


def test_a_page_answers_503_while_the_database_is_away(web_server):
    base = web_server(DATABASE_URL=_unreachable())

    answer = http.get(base, "/portal/", timeout=20, Cookie="sessionid=anything")

    assert answer.status == 503
    assert answer.headers["retry-after"] == "5"
    assert "cannot reach its database" in answer.body

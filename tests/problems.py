"""Checking RFC 9457 problem responses in tests."""

from agentportal.errors import DomainError
from agentportal.problems import CONTENT_TYPE, problem_of


def assert_problem(response, status: int, code: str) -> dict:
    """The response is the problem `code` with `status`, complete and without a traceback."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith(CONTENT_TYPE), response["Content-Type"]
    body = response.json()
    for member in ("type", "title", "status", "detail", "instance", "code"):
        assert member in body, member
    assert body["status"] == status
    assert body["code"] == code, body
    assert body["type"].endswith(f"/problems/{code}")
    assert body["title"]
    assert body["detail"]
    assert body["instance"] == response.request["PATH_INFO"]
    assert "Traceback" not in response.content.decode()
    return body


def refusal_problem(error: DomainError) -> tuple[int, str]:
    """The status and code the API answers a service's refusal with."""
    problem = problem_of(error)
    return problem.status, problem.code

"""Checking RFC 9457 problem responses in tests."""

from agentportal.problems import CONTENT_TYPE


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

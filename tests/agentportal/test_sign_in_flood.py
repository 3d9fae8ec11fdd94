"""A flood of failed sign-ins does not starve the API: no database connection is held while a
password is hashed, so the web server's pool stays free for other requests."""

import re
import threading
import urllib.error
import urllib.request
from urllib.parse import urlencode

import pytest
from django.test import Client

from agentportal.models import Merchant
from tests import factories, http
from tests.hashers import CountingHasher
from tests.threads import in_threads

pytestmark = [pytest.mark.counters, pytest.mark.usefixtures("demo", "fresh_cache")]

FLOOD = 120


@pytest.mark.parametrize(
    ("username", "password", "status"),
    [("sam", "demo", 302), ("sam", "wrong", 200), ("nobody", "wrong", 200)],
)
def test_no_database_connection_is_held_while_a_password_is_hashed(
    transactional_db, settings, username, password, status
):
    # given a hasher that notes whether its thread holds a connection
    settings.PASSWORD_HASHERS = ["tests.hashers.CountingHasher"]
    CountingHasher.hashed = CountingHasher.hashed_connected = 0

    # when someone signs in (rightly, wrongly, or with a name nobody has)
    answer = Client().post("/accounts/login/", {"username": username, "password": password})

    # then the password was hashed, with no connection held
    assert answer.status_code == status
    assert CountingHasher.hashed == 1
    assert CountingHasher.hashed_connected == 0


def _sign_in_form(base: str) -> tuple[str, str]:
    """The CSRF cookie and the form's token, which every sign-in of the flood reuses."""
    page = urllib.request.urlopen(base + "/accounts/login/", timeout=20)
    cookie = page.headers["Set-Cookie"].split(";")[0]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.read().decode())
    return cookie, token[1]


def _sign_in(base: str, cookie: str, token: str, username: str) -> int:
    body = urlencode({"csrfmiddlewaretoken": token, "username": username, "password": "guess"})
    request = urllib.request.Request(
        base + "/accounts/login/", data=body.encode(), headers={"Cookie": cookie}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_flood_of_failed_sign_ins_leaves_the_api_answering(web_server):
    # given a web server with a small pool of database connections, whose password hasher takes
    # as long as PBKDF2, and a supervisor's key
    from django.contrib.auth.models import User

    key = factories.api_key_for(
        User.objects.get(username="sam"), Merchant.objects.get(slug="demo-shop")
    )
    base = web_server(
        DJANGO_SETTINGS_MODULE="tests.settings_slow_hashing", AGENTPORTAL_WEB_DB_POOL="4"
    )
    cookie, token = _sign_in_form(base)

    # when 120 sign-ins with unknown names arrive at once while the supervisor lists runs
    started, ended = threading.Event(), threading.Event()
    api: list[int] = []

    def supervisor() -> None:
        started.wait(timeout=60)
        while not ended.is_set() or not api:
            api.append(http.get(base, "/api/v1/runs", key=key, timeout=60).status)

    listing = threading.Thread(target=supervisor)
    listing.start()

    def flood(number: int):
        def sign_in() -> int:
            started.set()
            return _sign_in(base, cookie, token, f"nobody{number}")

        return sign_in

    try:
        sign_ins = in_threads([flood(number) for number in range(FLOOD)])
    finally:
        ended.set()
        listing.join(timeout=90)

    # then every sign-in was answered with the form again, and every API call was answered
    assert _tally(sign_ins) == {200: FLOOD}
    assert api and _tally(api) == {200: len(api)}


def _tally(statuses: list[int]) -> dict[int, int]:
    return {status: statuses.count(status) for status in sorted(set(statuses))}

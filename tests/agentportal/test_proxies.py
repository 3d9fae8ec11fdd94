"""Who the client is, as the sign-in lockout and the rate limits count it: the connection's own
address, unless the connection comes from a proxy named in AGENTPORTAL_TRUSTED_PROXIES. Through
the real web server (gunicorn and uvicorn, as runportal starts them), whose own reading of
X-Forwarded-For must agree with Django's."""

import http.client
import os
import signal
import subprocess
import sys
from http.cookies import SimpleCookie
from urllib.parse import urlencode, urlsplit

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.test import RequestFactory

from agentportal.proxies import client_address
from approvals.bench.measure import free_port
from tests import http as portal_http
from tests.conftest import ROOT, database_url, wait_for
from tests.product import manage

pytestmark = pytest.mark.usefixtures("fresh_cache")


@pytest.fixture
def sam(demo):
    """sam's password `demo`, hashed as the web server checks it (few rounds: the test is
    about who is counted, not about the hash's cost)."""
    user = User.objects.get(username="sam")
    user.password = PBKDF2PasswordHasher().encode("demo", "saltsaltsalt", iterations=1000)
    user.save(update_fields=["password"])
    return user


def _sign_in(base: str, password: str, *, forwarded_for: str = "") -> tuple[int, str]:
    """sam signs in on the portal's page, as a browser does (the CSRF cookie first)."""
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    try:
        connection.request("GET", "/accounts/login/", headers=headers)
        page = connection.getresponse()
        page.read()
        cookies = SimpleCookie()
        for header in page.headers.get_all("Set-Cookie"):
            cookies.load(header)
        token = cookies["csrftoken"].value
        form = {"username": "sam", "password": password, "csrfmiddlewaretoken": token}
        connection.request(
            "POST",
            "/accounts/login/",
            body=urlencode(form),
            headers={
                **headers,
                "Cookie": f"csrftoken={token}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


LOCKED = "Too many attempts"


def test_with_no_proxy_trusted_a_forwarded_for_header_changes_nobodys_address(sam, web_server):
    # given the web server as the demo runs it: no proxy named
    base = web_server()

    # when a client on 127.0.0.1 guesses five times, each time claiming another address
    for guess in range(5):
        status, page = _sign_in(base, f"guess{guess}", forwarded_for=f"10.0.0.{guess}")
        assert status == 200 and LOCKED not in page

    # then the right password, from "9.9.9.9", is refused: it is still 127.0.0.1
    status, page = _sign_in(base, "demo", forwarded_for="9.9.9.9")
    assert status == 200
    assert LOCKED in page


def test_with_no_proxy_trusted_wrong_api_keys_are_counted_on_the_connection(web_server):
    base = web_server(AGENTPORTAL_AUTH_FAILURES_PER_MINUTE="3")

    answers = [
        portal_http.get(base, "/api/v1/runs", key="ap_wrong", **{"X-Forwarded-For": f"10.0.0.{n}"})
        for n in range(5)
    ]

    assert [answer.status for answer in answers] == [401, 401, 401, 429, 429]


def test_behind_a_trusted_proxy_the_address_it_saw_is_the_clients(sam, web_server):
    # given the web server behind a proxy on 127.0.0.1, which appends the peer it saw
    base = web_server(AGENTPORTAL_TRUSTED_PROXIES="127.0.0.1")

    # when a client at 203.0.113.5 guesses five times, writing its own header each time
    for guess in range(5):
        status, page = _sign_in(base, f"guess{guess}", forwarded_for=f"9.9.9.{guess}, 203.0.113.5")
        assert status == 200 and LOCKED not in page

    # then that client is locked whatever it writes, and sam elsewhere signs in
    status, page = _sign_in(base, "demo", forwarded_for="9.9.9.9, 203.0.113.5")
    assert LOCKED in page
    status, _page = _sign_in(base, "demo", forwarded_for="198.51.100.7")
    assert status == 302


def test_behind_a_trusted_proxy_changing_address_gains_little(sam, web_server):
    # given the web server behind a proxy on 127.0.0.1
    base = web_server(AGENTPORTAL_TRUSTED_PROXIES="127.0.0.1")

    # when 20 wrong passwords for sam come from five clients, four each (none of them locked)
    for address in range(5):
        for guess in range(4):
            status, page = _sign_in(base, f"g{guess}", forwarded_for=f"203.0.113.{address}")
            assert status == 200 and LOCKED not in page

    # then the name waits, whichever address the right password comes from
    status, page = _sign_in(base, "demo", forwarded_for="198.51.100.7")
    assert LOCKED in page


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "seen"),
    [
        ("203.0.113.5", "9.9.9.9", "203.0.113.5"),  # a client's own header
        ("10.0.0.2", "", "10.0.0.2"),  # the proxy's own request
        ("10.0.0.2", "9.9.9.9, 203.0.113.5", "203.0.113.5"),
        ("10.0.0.2", "9.9.9.9, 203.0.113.5, 10.1.2.3", "203.0.113.5"),  # two proxies
        ("10.0.0.2", "203.0.113.5:4711", "203.0.113.5"),
        ("10.0.0.2", "[2001:db8::7]:4711", "2001:db8::7"),
        ("10.0.0.2", "10.3.3.3, 10.1.2.3", "10.3.3.3"),  # from inside: the nearest address
        ("fd00::2", "9.9.9.9, 2001:db8::7", "2001:db8::7"),
    ],
)
def test_the_client_is_the_nearest_address_no_trusted_proxy_holds(
    settings, peer, forwarded_for, seen
):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "TRUSTED_PROXIES": ("10.0.0.0/8", "fd00::/8")}
    request = RequestFactory().get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded_for)

    assert client_address(request) == seen


def test_a_trusted_proxy_that_is_not_a_network_is_refused_in_one_sentence():
    started = manage("check", DJANGO_SECRET_KEY="k" * 50, AGENTPORTAL_TRUSTED_PROXIES="1")

    assert started.returncode != 0
    assert started.stderr.strip() == (
        "agentportal: AGENTPORTAL_TRUSTED_PROXIES lists the addresses or networks of the "
        "proxies in front of the web server, such as 10.0.0.5,10.1.0.0/16 (not a count); "
        "'1' is neither."
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("host", "proxies", "warned"),
    [("0.0.0.0", "", True), ("0.0.0.0", "10.0.0.2", False), ("127.0.0.1", "", False)],
    ids=["everyone-no-proxy", "everyone-proxy-named", "loopback"],
)
def test_runportal_warns_when_it_serves_everyone_with_no_proxy_named(
    tmp_path, host, proxies, warned
):
    log = tmp_path / "portal.log"
    env = {key: value for key, value in os.environ.items() if key != "AGENTPORTAL_TRUSTED_PROXIES"}
    portal = subprocess.Popen(
        [
            *(sys.executable, str(ROOT / "manage.py"), "runportal", "--role", "web"),
            *("--host", host, "--port", str(free_port()), "--web-processes", "1"),
        ],
        env={
            **env,
            "DJANGO_SETTINGS_MODULE": "agentportal.settings",
            "DATABASE_URL": database_url(),
            **({"AGENTPORTAL_TRUSTED_PROXIES": proxies} if proxies else {}),
        },
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: "Agent Portal is running" in log.read_text(), timeout=60)
    finally:
        portal.send_signal(signal.SIGTERM)
        portal.wait(timeout=60)

    said = log.read_text()
    assert ("AGENTPORTAL_TRUSTED_PROXIES is not set" in said) is warned

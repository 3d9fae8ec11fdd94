"""Rate limits under requests that arrive together, through the real web server: each request
is counted by one atomic increment in the shared cache, so parallel clients pass no more than
the limit."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from agentportal.models import Merchant
from tests import factories, http

pytestmark = [pytest.mark.counters, pytest.mark.usefixtures("demo", "fresh_cache")]

CLIENTS = 16


def _statuses(base: str, key: str, requests: int) -> list[int]:
    with ThreadPoolExecutor(CLIENTS) as clients:
        return list(
            clients.map(lambda _: http.get(base, "/api/v1/runs", key=key).status, range(requests))
        )


def test_sixteen_clients_of_one_key_pass_no_more_than_its_rate(web_server):
    # given a key limited to 40 requests a minute, on a web server
    from django.contrib.auth.models import User

    key = factories.api_key_for(
        User.objects.get(username="sam"), Merchant.objects.get(slug="demo-shop")
    )
    base = web_server(AGENTPORTAL_API_RATE="40/minute")

    # when 16 clients send 200 requests with it at once
    statuses = _statuses(base, key, 200)

    # then exactly 40 are answered and the others are refused
    assert statuses.count(200) == 40
    assert statuses.count(429) == 160


def test_sixteen_clients_guessing_keys_get_no_more_401s_than_the_limit(web_server):
    # given at most 20 wrong keys a minute from one address (the default)
    base = web_server()

    # when 16 clients send 300 wrong keys at once
    statuses = _statuses(base, "ap_guess_0000000000000000", 300)

    # then 20 are told the key is wrong and the others are refused before that
    assert statuses.count(401) == 20
    assert statuses.count(429) == 280

"""Reading the portal's pages as a signed-in person, through Django's test client."""

import http.client
import re

from django.contrib.auth.models import User
from django.test import Client

from tests.http import open_stream


def signed_in(who: str | User) -> Client:
    """A test client signed in as `who` (a username, or the user)."""
    user = who if isinstance(who, User) else User.objects.get(username=who)
    client = Client()
    client.force_login(user)
    return client


def page_text(response) -> str:
    """The page's HTML with its white space folded, to look for sentences in it."""
    return re.sub(r"\s+", " ", response.content.decode())


def inbox_rows(page) -> list[str]:
    """The interrupt ids of the inbox's rows (a response, or its HTML), in their order."""
    html = page if isinstance(page, str) else page.content.decode()
    return re.findall(r'data-interrupt="([^"]+)"', html)


def page_stream(base: str, who: str | None, path: str) -> http.client.HTTPResponse:
    """Open a page's live stream on the server at `base` as `who` (signed in with a session
    cookie), or as nobody."""
    headers = {}
    if who:
        headers["Cookie"] = f"sessionid={signed_in(who).cookies['sessionid'].value}"
    return open_stream(base, path, **headers)

"""Reading the portal's pages as a signed-in person, through Django's test client."""

import re

from django.contrib.auth.models import User
from django.test import Client


def signed_in(who: str | User) -> Client:
    """A test client signed in as `who` (a username, or the user)."""
    user = who if isinstance(who, User) else User.objects.get(username=who)
    client = Client()
    client.force_login(user)
    return client


def page_text(response) -> str:
    """The page's HTML with its white space folded, to look for sentences in it."""
    return re.sub(r"\s+", " ", response.content.decode())

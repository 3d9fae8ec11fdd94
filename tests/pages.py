"""Reading the portal's pages as a signed-in person, through Django's test client."""

import re

from django.contrib.auth.models import User
from django.test import Client


def signed_in(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def page_text(response) -> str:
    """The page's HTML with its white space folded, to look for sentences in it."""
    return re.sub(r"\s+", " ", response.content.decode())

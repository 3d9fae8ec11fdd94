"""Sign-ins that arrive together: each reserves its attempt before its password is checked, so
no more passwords are checked for a name and address than the limit allows, however many come
at once."""

import pytest
from django.test import Client

from tests.hashers import CountingHasher
from tests.threads import in_threads

pytestmark = [pytest.mark.counters, pytest.mark.usefixtures("fresh_cache")]


@pytest.fixture
def hashing(settings):
    """Every password the sign-in hashes is counted (each takes as long as a real hash)."""
    settings.PASSWORD_HASHERS = ["tests.hashers.CountingHasher"]
    CountingHasher.hashed = 0
    return CountingHasher


@pytest.mark.parametrize("page", ["/accounts/login/", "/admin/login/"])
def test_sixty_wrong_passwords_at_once_have_at_most_five_checked(
    transactional_db, demo, hashing, page
):
    # given sixty guesses at sam's password from one address
    def guess(number: int):
        def post():
            answer = Client(REMOTE_ADDR="203.0.113.20").post(
                page, {"username": "sam", "password": f"guess{number}"}
            )
            return answer.status_code, answer.text

        return post

    hashing.hashed = 0

    # when they all arrive at once
    answers = in_threads([guess(number) for number in range(60)])

    # then at most five passwords were checked, every other guess was told to wait, and
    # nobody was signed in
    assert hashing.hashed <= 5
    assert [status for status, _ in answers] == [200] * 60
    assert sum("Too many attempts" in text for _, text in answers) >= 55
    # and the right password now waits too, without being checked
    hashed = hashing.hashed
    right = Client(REMOTE_ADDR="203.0.113.20").post(page, {"username": "sam", "password": "demo"})
    assert "Too many attempts" in right.text
    assert hashing.hashed == hashed

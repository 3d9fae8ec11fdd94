"""Guessing passwords is slowed down on the portal's and the admin's sign-in pages."""

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_cache")]


@pytest.mark.parametrize("page", ["/accounts/login/", "/admin/login/"])
def test_after_five_wrong_passwords_even_the_right_one_waits(demo, page):
    guesser = Client(REMOTE_ADDR="203.0.113.7")
    for guess in range(5):
        wrong = guesser.post(page, {"username": "sam", "password": f"guess{guess}"})
        assert wrong.status_code == 200
        assert "Too many attempts" not in wrong.text

    # when the right password comes sixth, from the same address
    locked = guesser.post(page, {"username": "sam", "password": "demo"})

    # then it is refused with the reason, and sam from his own address still signs in
    assert locked.status_code == 200
    assert "Too many attempts; try again in 15 minutes." in locked.text
    assert "_auth_user_id" not in guesser.session
    own = Client(REMOTE_ADDR="198.51.100.2")
    assert own.post(page, {"username": "sam", "password": "demo"}).status_code == 302


def test_a_successful_sign_in_clears_the_failures(demo):
    sam = Client(REMOTE_ADDR="198.51.100.9")
    for guess in range(4):
        sam.post("/accounts/login/", {"username": "sam", "password": f"typo{guess}"})
    assert sam.post("/accounts/login/", {"username": "sam", "password": "demo"}).status_code == 302
    sam.logout()
    for guess in range(4):
        sam.post("/accounts/login/", {"username": "sam", "password": f"typo{guess}"})

    assert sam.post("/accounts/login/", {"username": "sam", "password": "demo"}).status_code == 302

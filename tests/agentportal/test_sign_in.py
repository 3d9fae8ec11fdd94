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


def test_a_blank_password_does_not_reset_the_count(demo):
    guesser = Client(REMOTE_ADDR="203.0.113.8")
    for round_ in range(3):
        for guess in range(2):
            guesser.post("/accounts/login/", {"username": "sam", "password": f"g{round_}{guess}"})
        guesser.post("/accounts/login/", {"username": "sam", "password": ""})

    locked = guesser.post("/accounts/login/", {"username": "sam", "password": "demo"})

    assert "Too many attempts" in locked.text


def test_another_spelling_of_the_name_is_the_same_count(demo):
    guesser = Client(REMOTE_ADDR="203.0.113.9")
    for guess in range(5):
        guesser.post("/accounts/login/", {"username": "sam", "password": f"guess{guess}"})

    # fullwidth letters sign in as sam (Django normalizes names), so they are sam's count too
    fullwidth_sam = "\uff53\uff41\uff4d"
    locked = guesser.post("/accounts/login/", {"username": fullwidth_sam, "password": "demo"})

    assert "Too many attempts" in locked.text


def test_a_nul_character_in_the_name_is_a_form_error(demo):
    response = Client().post("/accounts/login/", {"username": "sam\x00", "password": "x"})

    assert response.status_code == 200


def test_a_clients_own_forwarded_for_header_does_not_reset_its_count(demo):
    for guess in range(5):
        Client(REMOTE_ADDR="203.0.113.10", HTTP_X_FORWARDED_FOR=f"10.0.0.{guess}").post(
            "/accounts/login/", {"username": "sam", "password": f"guess{guess}"}
        )

    locked = Client(REMOTE_ADDR="203.0.113.10", HTTP_X_FORWARDED_FOR="10.9.9.9").post(
        "/accounts/login/", {"username": "sam", "password": "demo"}
    )

    assert "Too many attempts" in locked.text


def test_a_name_guessed_from_many_addresses_waits_an_hour(demo):
    # given 20 wrong passwords for sam, four from each of five addresses (none of them locked)
    for address in range(5):
        guesser = Client(REMOTE_ADDR=f"203.0.113.{20 + address}")
        for guess in range(4):
            wrong = guesser.post("/accounts/login/", {"username": "sam", "password": f"g{guess}"})
            assert "Too many attempts" not in wrong.text

    # when the right password comes from yet another address
    locked = Client(REMOTE_ADDR="198.51.100.30").post(
        "/accounts/login/", {"username": "sam", "password": "demo"}
    )

    # then it is refused for the name's slower window, and sue is not affected
    assert "Too many attempts; try again in 60 minutes." in locked.text
    sue = Client(REMOTE_ADDR="203.0.113.20")
    assert sue.post("/accounts/login/", {"username": "sue", "password": "demo"}).status_code == 302

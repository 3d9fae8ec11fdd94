"""Who a request acts as: bearer keys only, and idempotency keys scoped per user and shop."""

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from agentportal.models import Membership, Merchant, Role
from tests import factories


def test_a_signed_in_browser_session_is_not_an_api_credential(demo):
    client = APIClient()
    client.force_login(User.objects.get(username="sam"))

    response = client.get("/api/v1/runs")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_the_same_idempotency_key_in_two_shops_makes_two_runs(demo):
    # given: alice is a customer of both shops
    alice = User.objects.get(username="alice")
    other = Merchant.objects.get(slug="other-shop")
    Membership.objects.create(user=alice, merchant=other, role=Role.CUSTOMER)
    body = {"message": "What is the status of order ORD-1001?"}
    ids = []
    for shop in (demo, other):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.api_key_for(alice, shop)}")

        # when
        response = client.post("/api/v1/runs", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")

        # then: each shop gets its own run
        assert response.status_code == 201
        ids.append(response.json()["id"])
    assert ids[0] != ids[1]

"""A customer's conversation over the API, as their client drives it, in a shop whose agent
tracks parcels (tests/extension_app/parcels.py); and, for the tests that need it, an agent
that asks the customer which parcel they mean and waits for the answer."""

from django.contrib.auth.models import User

from agentportal.models import Merchant, Role
from runs.models import ConversationMessage
from tests import factories
from tests.extension_app import parcels
from tests.runs.helpers import STATUS_QUESTION

STATUS = STATUS_QUESTION.format(parcel="PCL-1")
FOLLOW_UP = "And parcel PCL-2?"


def supervisor_create(shop: Merchant, username: str) -> User:
    """A supervisor of the shop, who may command its customers' conversations."""
    return factories.user_create(username, merchant=shop, role=Role.SUPERVISOR)


def conversation_open(client) -> str:
    """A new conversation of the client's customer; its id."""
    response = client.post("/api/v1/conversations", {}, format="json")
    assert response.status_code == 201
    assert response.json()["status"] == "OPEN"
    return response.json()["id"]


def say(client, conversation_id: str, text: str):
    """Send a message (or a command) in the conversation; the response."""
    return client.post(
        f"/api/v1/conversations/{conversation_id}/messages", {"text": text}, format="json"
    )


def message_statuses(conversation_id: str) -> list[str]:
    """The statuses of the conversation's messages, oldest first."""
    return list(
        ConversationMessage.objects.filter(conversation_id=conversation_id)
        .order_by("created_at", "pk")
        .values_list("status", flat=True)
    )


def asking_agent(shop: Merchant) -> None:
    """The shop's agent asks which parcel when the customer names none (a clarification: the
    run waits for their answer), and goes on with the answer."""
    factories.release_publish(
        merchant=shop, model=f"scripted:{parcels.SCRIPT}", tools=[*parcels.TOOLS, parcels.ASK]
    )

"""A customer's conversation over the API, as their client drives it."""

from runs.models import ConversationMessage

STATUS = "What is the status of order ORD-1001?"


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

"""A customer's conversation over the API, as their client drives it, in a shop whose agent
tracks parcels (tests/extension_app/parcels.py); and, for the tests that need it, an agent
that asks the customer which parcel they mean and waits for the answer."""

import dataclasses
from typing import Any

from django.contrib.auth.models import User
from pydantic import BaseModel, ConfigDict, Field

from agentportal.models import Merchant, Role
from runs import extensions
from runs.models import ConversationMessage
from runs.scripted import Transcript
from runs.tools import TOOLS, Policy, Tool
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


# --- an agent that asks which parcel ---------------------------------------------------------

ASK = "ask_which_parcel"
ASKING_SCRIPT = "parcels-asking"
QUESTION = "Which parcel is this about?"


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=200)


ASK_WHICH_PARCEL = Tool(
    name=ASK,
    description="Ask the customer which parcel they mean, and wait for the answer.",
    args_model=Question,
    policy=Policy.CLARIFICATION,
)


def asking_script(turn: Transcript, declared: set[str]) -> str | tuple[str, dict[str, Any]]:
    """The parcels script, except that when the customer named no parcel it asks which one
    (a clarification: the run waits for their answer) and goes on with the answer."""
    if ASK in turn.results:
        answer = str(turn.results[ASK].get("answer", ""))
        turn = dataclasses.replace(turn, text=f"{turn.text}\n{answer}", said=[answer, *turn.said])
    elif not any(parcels.PARCEL_NUMBER.search(text) for text in turn.said):
        return (ASK, {"question": QUESTION})
    return parcels.parcels_script(turn, declared)


def asking_agent(monkeypatch, shop: Merchant) -> None:
    """For one test, the shop's agent asks which parcel when the customer names none: the
    tool and the script are registered until the test ends, and the shop's release plays
    them."""
    monkeypatch.setitem(TOOLS, ASK, ASK_WHICH_PARCEL)
    registry = extensions._registry
    monkeypatch.setattr(registry, "scripts", {**registry.scripts, ASKING_SCRIPT: asking_script})
    factories.release_publish(
        merchant=shop, model=f"scripted:{ASKING_SCRIPT}", tools=[*parcels.TOOLS, ASK]
    )

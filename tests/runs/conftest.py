from functools import partial

import pytest

from agentportal.models import Merchant
from tests.runs.conversation_helpers import supervisor_create
from tests.runs.helpers import customer_with_parcel, shop_create
from tests.runs.openai_server import chat_servers, openai_shop, openai_use


@pytest.fixture
def parcel_shop(db) -> Merchant:
    """A shop whose agent tracks parcels, and its customer pat, whose parcel PCL-1 is on its
    way: `api("pat", merchant="parcel-shop")` asks as pat."""
    shop = shop_create(slug="parcel-shop")
    customer_with_parcel(shop, "PCL-1", username="pat")
    return shop


@pytest.fixture
def pat(parcel_shop, api):
    """pat's client: a customer of the parcel shop."""
    return api("pat", merchant="parcel-shop")


@pytest.fixture
def sue(parcel_shop, api):
    """sue's client: a supervisor of pat's shop."""
    supervisor_create(parcel_shop, "sue")
    return api("sue", merchant="parcel-shop")


@pytest.fixture
def locker_latency(settings):
    """locker_latency(seconds): how long the test extension's locker search takes."""

    def set_latency(seconds: float) -> None:
        settings.PARCEL_LOCKER_LATENCY_SECONDS = seconds

    return set_latency


@pytest.fixture
def chat_server():
    """chat_server(answer) -> a running OpenAI-compatible server (tests/runs/openai_server.py),
    stopped after the test."""
    with chat_servers() as start:
        yield start


@pytest.fixture
def openai_model(settings):
    """openai_model(server, timeout=...): the runtime's model is that server, through the real
    openai client."""
    return partial(openai_use, settings)


@pytest.fixture
def endpoint_shop(parcel_shop) -> Merchant:
    """The parcel shop, its release asking the model that openai_model names."""
    return openai_shop(parcel_shop)

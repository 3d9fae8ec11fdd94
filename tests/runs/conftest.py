import pytest

from agentportal.models import Merchant
from tests.runs.helpers import customer_with_parcel, shop_create


@pytest.fixture
def parcel_shop(db) -> Merchant:
    """A shop whose agent tracks parcels, and its customer pat, whose parcel PCL-1 is on its
    way: `api("pat", merchant="parcel-shop")` asks as pat."""
    shop = shop_create(slug="parcel-shop")
    customer_with_parcel(shop, "PCL-1", username="pat")
    return shop


@pytest.fixture
def locker_latency(settings):
    """locker_latency(seconds): how long the test extension's locker search takes."""

    def set_latency(seconds: float) -> None:
        settings.PARCEL_LOCKER_LATENCY_SECONDS = seconds

    return set_latency

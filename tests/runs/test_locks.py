"""What the runtime's locks hold, on PostgreSQL, where they are row locks (on SQLite the
IMMEDIATE transaction holds the database's one write lock instead)."""

import threading

import pytest
from django.db import OperationalError, connection, transaction

from agentportal.models import Merchant
from runs import locks
from runs.conversations import conversation_create
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def row_locks():
    if not connection.features.has_select_for_update:
        pytest.skip("SQLite has no row locks: its transaction holds the database's write lock")


def _while_held(lock, probe):
    """Run `probe` in another connection while this thread holds `lock`; its outcome."""
    outcome = {}

    def other() -> None:
        try:
            with transaction.atomic():
                outcome["value"] = probe()
        except OperationalError as error:
            outcome["error"] = error
        finally:
            connection.close()

    with transaction.atomic():
        lock()
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=30)
    return outcome


def test_locking_a_conversation_leaves_its_shop_and_customer_free():
    # given a conversation, read with its merchant and customer
    shop = factories.merchant_create()
    pat = factories.user_create(merchant=shop)
    conversation = conversation_create(merchant=shop, customer=pat)

    # when one transaction locks the conversation, another locks its shop without waiting
    outcome = _while_held(
        lambda: locks.conversation_lock(conversation.pk),
        lambda: Merchant.objects.select_for_update(nowait=True).get(pk=shop.pk).pk,
    )

    # then the shop's row was free: only the conversation's row is locked
    assert outcome == {"value": shop.pk}


def test_a_locked_conversation_is_locked():
    shop = factories.merchant_create()
    pat = factories.user_create(merchant=shop)
    conversation = conversation_create(merchant=shop, customer=pat)

    outcome = _while_held(
        lambda: locks.conversation_lock(conversation.pk),
        lambda: locks.conversation_lock_nowait(conversation.pk),
    )

    assert outcome == {"value": False}

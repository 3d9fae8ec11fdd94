"""Data migrations keep what runs and releases already stored meaning the same."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("runs", "0005_input_keys_per_principal")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_stored_waits_and_release_models_survive_the_upgrade():
    # given a clarification, a plan's wait and two releases stored before the upgrade
    old = _migrate(BEFORE)
    Merchant = old.get_model("agentportal", "Merchant")
    User = old.get_model("auth", "User")
    AgentRun = old.get_model("runs", "AgentRun")
    AgentRelease = old.get_model("runs", "AgentRelease")
    shop = Merchant.objects.create(slug="old-shop", name="Old shop")
    pat = User.objects.create(username="old-pat")
    core = {"tool_name": "t", "tool_key": "agent:x:1:0", "tool_args": {}}
    asked = AgentRun.objects.create(
        merchant=shop,
        account=pat,
        wait_state={
            "interrupt_id": "int-1",
            "kind": "clarification",
            **core,
            "question": "Which parcel?",
            "ticket_id": None,
            "proposal_version": None,
        },
    )
    planned = AgentRun.objects.create(
        merchant=shop,
        account=pat,
        wait_state={
            "interrupt_id": "int-2",
            "kind": "confirmation",
            **core,
            "question": None,
            "ticket_id": "7d9e0a52-3f55-4a7c-9f39-7a1f1c1f7a11",
            "proposal_version": 2,
        },
    )
    idle = AgentRun.objects.create(merchant=shop, account=pat)
    odd = AgentRelease.objects.create(
        merchant=shop, version=1, graph_version="g", manifest={"model": "gpt-4o"}
    )
    known = AgentRelease.objects.create(
        merchant=shop, version=2, graph_version="g", manifest={"model": "openai"}
    )

    # when the project is migrated to its latest state
    new = _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    AgentRun = new.get_model("runs", "AgentRun")
    AgentRelease = new.get_model("runs", "AgentRelease")

    # then each wait keeps what its kind adds, in its payload, and nothing else changed
    assert AgentRun.objects.get(pk=asked.pk).wait_state == {
        "interrupt_id": "int-1",
        "kind": "clarification",
        **core,
        "payload": {"question": "Which parcel?"},
    }
    assert AgentRun.objects.get(pk=planned.pk).wait_state["payload"] == {
        "ticket_id": "7d9e0a52-3f55-4a7c-9f39-7a1f1c1f7a11",
        "proposal_version": 2,
    }
    assert AgentRun.objects.get(pk=idle.pk).wait_state is None
    # a model name the code never knew played the scripted model, and still does
    assert AgentRelease.objects.get(pk=odd.pk).manifest["model"] == "scripted"
    assert AgentRelease.objects.get(pk=known.pk).manifest["model"] == "openai"

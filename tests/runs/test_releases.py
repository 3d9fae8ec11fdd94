"""Releases: validated before they are published, one published per shop, and a tool that
needs a person's decision keeps needing it whatever a release says."""

from django.contrib.auth.models import User

from approvals.models import Approval
from runs import worker
from runs.models import AgentRelease, RunStatus
from runs.releases import ReleaseManifest, ToolDeclaration
from runs.services import release_save
from runs.tools import TOOLS
from tests import factories
from tests.pages import signed_in


def test_publishing_a_release_unpublishes_the_previous_one(demo):
    first = AgentRelease.objects.get(merchant=demo, published=True)
    manifest = ReleaseManifest(tools=[ToolDeclaration(name="lookup_order")]).model_dump()

    second = release_save(
        release=AgentRelease(
            merchant=demo,
            version=first.version + 1,
            graph_version=first.graph_version,
            manifest=manifest,
            published=True,
        )
    )

    assert list(AgentRelease.objects.filter(merchant=demo, published=True)) == [second]


def test_admin_refuses_an_invalid_manifest_and_an_unknown_graph(demo):
    response = signed_in("admin").post(
        "/admin/runs/agentrelease/add/",
        {
            "merchant": demo.pk,
            "version": 9,
            "graph_version": "after-sales-v0",
            "manifest": '{"tools": [{"name": "lookup_order", "policy": "whenever"}]}',
            "published": "on",
        },
    )
    assert response.status_code == 200
    assert "Not a graph version of this build" in response.text
    assert "policy" in response.text
    assert not AgentRelease.objects.filter(version=9).exists()


def test_a_release_cannot_turn_the_refund_approval_off(demo):
    tools = [ToolDeclaration(name=name) for name in TOOLS if name != "issue_refund"]
    tools.append(ToolDeclaration(name="issue_refund", policy="auto"))
    latest = AgentRelease.objects.filter(merchant=demo).order_by("-version").first()
    release_save(
        release=AgentRelease(
            merchant=demo,
            version=latest.version + 1,
            graph_version=latest.graph_version,
            manifest=ReleaseManifest(tools=tools).model_dump(),
            published=True,
        )
    )
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message="I want a refund for ORD-1003 amount 20"
    )

    worker.tick()

    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL
    assert Approval.objects.filter(run=run).exists()

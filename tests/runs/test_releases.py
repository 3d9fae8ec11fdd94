"""Releases: validated before they are published, one published per shop, and a tool that
needs a person's decision keeps needing it whatever a release says."""

from django.contrib.auth.models import User

from runs import worker
from runs.models import AgentRelease, RunEvent, RunStatus
from runs.releases import ReleaseManifest, ToolDeclaration
from runs.services import release_save
from tests import factories
from tests.extension_app import parcels, signoff
from tests.pages import signed_in
from tests.runs.helpers import customer_with_parcel, shop_create


def test_publishing_a_release_unpublishes_the_previous_one(db):
    shop = shop_create()
    first = AgentRelease.objects.get(merchant=shop, published=True)
    manifest = ReleaseManifest(tools=[ToolDeclaration(name=parcels.TRACK)]).model_dump()

    second = release_save(
        release=AgentRelease(
            merchant=shop,
            version=first.version + 1,
            graph_version=first.graph_version,
            manifest=manifest,
            published=True,
        )
    )

    assert list(AgentRelease.objects.filter(merchant=shop, published=True)) == [second]


def test_admin_refuses_an_invalid_manifest_and_an_unknown_graph(db):
    shop = shop_create()
    admin = User.objects.create_superuser("root", password="pw")
    response = signed_in(admin).post(
        "/admin/runs/agentrelease/add/",
        {
            "merchant": shop.pk,
            "version": 9,
            "graph_version": "parcels-v0",
            "manifest": '{"tools": [{"name": "track_parcel", "policy": "whenever"}]}',
            "published": "on",
        },
    )
    assert response.status_code == 200
    assert "Not a graph version of this build" in response.text
    assert "policy" in response.text
    assert not AgentRelease.objects.filter(version=9).exists()


def test_a_release_cannot_make_a_sign_off_automatic(db):
    # given a release that declares the test extension's sign-off tool as automatic
    shop = shop_create()
    latest = AgentRelease.objects.get(merchant=shop, published=True)
    tools = [ToolDeclaration(name=name) for name in parcels.TOOLS]
    tools.append(ToolDeclaration(name=signoff.TOOL, policy="auto"))
    release_save(
        release=AgentRelease(
            merchant=shop,
            version=latest.version + 1,
            graph_version=latest.graph_version,
            manifest=ReleaseManifest(model=f"scripted:{signoff.SCRIPT}", tools=tools).model_dump(),
            published=True,
        )
    )
    customer = customer_with_parcel(shop, "PCL-1")
    run = factories.run_queue(customer=customer, merchant=shop, message="Leave it at the door")

    # when a worker runs the agent, which asks for a sign-off
    worker.tick()

    # then the run still waits for the customer's sign-off
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_USER
    assert run.wait_state["kind"] == signoff.SIGNOFF.name
    assert RunEvent.objects.filter(run=run, type="signoff.requested").exists()

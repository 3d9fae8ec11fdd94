"""Who sees which runs in the listing, and how it filters and pages (API.md)."""

import base64
from datetime import UTC, datetime, timedelta

import pytest
from django.forms.models import model_to_dict

from agentportal.models import Merchant
from runs.models import AgentRun, RunStatus
from tests.api.runs_helpers import RUNS, post_run
from tests.problems import assert_problem

# --- listing -----------------------------------------------------------------------------------


def listed_ids(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {run["id"] for run in response.json()["results"]}


def test_list_shows_a_customer_only_their_runs_and_supervisors_the_merchants(demo, api):
    # given: runs of alice and bob in demo-shop, and of olga in other-shop
    alice_ids = {post_run(api("alice"), f"a{n}").json()["id"] for n in range(2)}
    bob_ids = {post_run(api("bob"), "b0").json()["id"]}
    olga_ids = {post_run(api("olga", merchant="other-shop"), "o0").json()["id"]}

    # then
    assert listed_ids(api("alice").get(RUNS)) == alice_ids
    assert listed_ids(api("bob").get(RUNS)) == bob_ids
    assert listed_ids(api("sam").get(RUNS)) == alice_ids | bob_ids
    assert listed_ids(api().get(RUNS)) == alice_ids | bob_ids
    assert listed_ids(api("olga", merchant="other-shop").get(RUNS)) == olga_ids
    assert listed_ids(api("oscar", merchant="other-shop").get(RUNS)) == olga_ids
    assert api("alice").get(RUNS).json()["next"] is None


def test_list_filters_by_status(demo, api):
    # given: one cancelled and two queued runs
    alice = api("alice")
    ids = [post_run(alice, f"s{n}").json()["id"] for n in range(3)]
    assert alice.post(f"{RUNS}/{ids[0]}/cancel").status_code == 200

    # then
    assert listed_ids(alice.get(RUNS, {"status": "CANCELLED"})) == {ids[0]}
    assert listed_ids(alice.get(RUNS, {"status": "QUEUED"})) == set(ids[1:])
    assert listed_ids(alice.get(RUNS, {"status": "COMPLETED"})) == set()
    assert listed_ids(api("sam").get(RUNS, {"status": "CANCELLED"})) == {ids[0]}


@pytest.mark.parametrize("status", ["queued", "DONE", "QUEUED,RUNNING"])
def test_list_with_an_unknown_status_is_400(demo, api, status):
    response = api("alice").get(RUNS, {"status": status})

    body = assert_problem(response, 400, "validation_error")
    assert [error["field"] for error in body["errors"]] == ["status"]


def runs_copied(template: AgentRun, count: int) -> list[AgentRun]:
    """count rows like template, in one INSERT (no key, so the idempotency constraint is mute)."""
    fields = model_to_dict(template, exclude=["id", "merchant", "account", "conversation"])
    fields.update(idempotency_key=None, request_hash="")
    return AgentRun.objects.bulk_create(
        [
            AgentRun(merchant=template.merchant, account=template.account, **fields)
            for _ in range(count)
        ]
    )


def all_pages(client, **params) -> list[list[str]]:
    pages, cursor = [], None
    for _ in range(10):
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = client.get(RUNS, query)
        assert response.status_code == 200, response.content
        pages.append([run["id"] for run in response.json()["results"]])
        cursor = response.json()["next"]
        if cursor is None:
            return pages
    raise AssertionError("pagination did not end")


def test_cursor_pagination_walks_every_run_once_newest_first(demo, api):
    # given: 61 runs of alice (the API's page is 50); 20 of them share one created_at, so the
    # keyset's tie-breaker on id is exercised
    template = AgentRun.objects.get(pk=post_run(api("alice"), "page-0").json()["id"])
    copies = runs_copied(template, 60)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for index, run in enumerate(copies[:40]):
        AgentRun.objects.filter(pk=run.pk).update(created_at=base + timedelta(seconds=index))
    AgentRun.objects.filter(pk__in=[run.pk for run in copies[40:]]).update(
        created_at=base + timedelta(days=1)
    )
    expected = [
        str(pk)
        for pk in AgentRun.objects.filter(account=template.account)
        .order_by("-created_at", "-pk")
        .values_list("pk", flat=True)
    ]
    assert len(expected) == 61

    # when
    pages = all_pages(api("alice"))

    # then
    assert [len(page) for page in pages] == [50, 11]
    walked = [run_id for page in pages for run_id in page]
    assert len(set(walked)) == len(walked) == 61
    assert walked == expected


def test_cursor_pagination_keeps_the_status_filter(demo, api):
    template = AgentRun.objects.get(pk=post_run(api("alice"), "page-f").json()["id"])
    runs_copied(template, 55)
    AgentRun.objects.filter(pk__in=list(AgentRun.objects.values_list("pk", flat=True)[:3])).update(
        status=RunStatus.FAILED
    )

    queued = all_pages(api("sam"), status="QUEUED")
    failed = all_pages(api("sam"), status="FAILED")

    assert [len(page) for page in queued] == [50, 3]
    assert [len(page) for page in failed] == [3]


def cursor_of(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor",
        "%%%",
        cursor_of("yesterday|x"),
        cursor_of("2026-01-01T00:00:00+00:00|not-a-uuid"),
        cursor_of("2026-01-01T00:00:00+00:00"),
    ],
    ids=["garbage", "not-base64", "bad-date", "bad-id", "no-id"],
)
def test_list_with_a_bad_cursor_is_400(demo, api, cursor):
    post_run(api("alice"), "bad-cursor")

    response = api("alice").get(RUNS, {"cursor": cursor})

    body = assert_problem(response, 400, "validation_error")
    assert [error["field"] for error in body["errors"]] == ["cursor"]


def test_merchants_are_isolated_even_in_bulk(demo, api):
    # A sanity check on the listing query: other-shop's supervisor sees none of demo-shop's runs.
    template = AgentRun.objects.get(pk=post_run(api("alice"), "iso").json()["id"])
    runs_copied(template, 5)
    assert Merchant.objects.filter(slug="other-shop").exists()

    assert listed_ids(api("oscar", merchant="other-shop").get(RUNS)) == set()

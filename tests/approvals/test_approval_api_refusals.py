"""Tool-call decisions over REST refused for who asks, what is sent or what is stored (API.md:
resume, approvals, problem codes; DESIGN 6.1): 404 and 403, 400, 422.

Every run here is the scripted refund: the agent looks ORD-1003 up, proposes issue_refund
(policy: approval) and waits WAITING_APPROVAL; runs.worker.tick() drives it in-process.
"""

import uuid

import pytest
from django.contrib.auth.models import User

from agentportal.models import Membership, Role
from agentportal.problems import CONTENT_TYPE
from agentportal.services import membership_revoke
from approvals.models import Approval, ApprovalStatus
from tests.approvals.approval_api_helpers import (
    APPROVALS,
    PROPOSED,
    RESUME,
    _set,
    recorded,
    tamper_snapshot,
)
from tests.problems import assert_problem


def error_fields(body: dict) -> list[str]:
    assert isinstance(body.get("errors"), list) and body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "message"}, error
        assert error["message"]
    return [error["field"] for error in body["errors"]]


# --- 404 / 403 -----------------------------------------------------------------------------


def test_supervisor_of_another_shop_gets_404_and_nothing_changes(refund_waiting, api, endpoint):
    # given
    before = recorded(refund_waiting)

    # when
    response = endpoint.post(
        api("oscar", merchant="other-shop"),
        refund_waiting.run.pk,
        refund_waiting.interrupt_id,
        decision="approve",
    )

    # then
    assert_problem(response, 404, endpoint.not_found_code)
    assert recorded(refund_waiting) == before


def test_unknown_run_or_interrupt_is_404(refund_waiting, api, endpoint):
    sam = api("sam")
    if endpoint is RESUME:
        response = endpoint.post(sam, uuid.uuid4(), refund_waiting.interrupt_id, decision="approve")
    else:
        response = endpoint.post(
            sam, refund_waiting.run.pk, "int-0000000000000000", decision="approve"
        )
    assert_problem(response, 404, endpoint.not_found_code)


def test_another_customer_gets_404_not_403(refund_waiting, api, endpoint):
    """API.md: runs of another customer answer 404, their existence is not revealed; the
    decision endpoint answers as resume does."""
    before = recorded(refund_waiting)

    response = endpoint.post(
        api("bob"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    assert response.status_code == 404, response.content
    assert response["Content-Type"].startswith(CONTENT_TYPE)
    assert response.json()["code"] in ("run_not_found", "not_found")
    assert recorded(refund_waiting) == before


def test_customer_may_not_decide_on_her_own_run_403(refund_waiting, api, endpoint):
    before = recorded(refund_waiting)

    response = endpoint.post(
        api("alice"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    assert_problem(response, 403, "permission_denied")
    assert recorded(refund_waiting) == before


def _sam_membership_revoked() -> None:
    assert membership_revoke(membership=Membership.objects.get(user__username="sam"))


def _sam_demoted_to_customer() -> None:
    Membership.objects.filter(user__username="sam").update(role=Role.CUSTOMER)


def _sam_deactivated() -> None:
    User.objects.filter(username="sam").update(is_active=False)


@pytest.mark.parametrize(
    "revoke",
    [
        pytest.param(_sam_membership_revoked, id="membership-revoked"),
        pytest.param(_sam_demoted_to_customer, id="demoted-to-customer"),
        pytest.param(_sam_deactivated, id="user-deactivated"),
    ],
)
def test_supervisor_revoked_after_the_pause_can_no_longer_decide(
    refund_waiting, api, endpoint, revoke
):
    # given: sam holds a key, then loses his role while the call waits
    sam = api("sam")
    before = recorded(refund_waiting)
    revoke()

    # when
    response = endpoint.post(
        sam, refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    # then: refused, and nothing moved
    assert response.status_code in (401, 403, 404), response.content
    assert response["Content-Type"].startswith(CONTENT_TYPE)
    assert recorded(refund_waiting) == before
    assert (
        Approval.objects.get(pk=refund_waiting.approval.pk).status
        == ApprovalStatus.PENDING_APPROVAL
    )
    assert sam.get(APPROVALS).status_code in (401, 403)


# --- 400 -----------------------------------------------------------------------------------

BAD_BODIES = [
    pytest.param({"decision": "maybe"}, "decision", id="unknown-decision"),
    pytest.param({}, "decision", id="decision-missing"),
    pytest.param({"decision": "reject"}, "reason", id="reject-without-reason"),
    pytest.param({"decision": "reject", "reason": "   "}, "reason", id="reject-blank-reason"),
    pytest.param({"decision": "reject", "reason": 7}, "reason", id="reason-number"),
    pytest.param({"decision": "revise"}, "tool_args", id="revise-without-tool-args"),
    pytest.param({"decision": "revise", "tool_args": "amount=5"}, "tool_args", id="args-string"),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "amount": "-5"}},
        "tool_args.amount",
        id="revise-negative-amount",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "amount": "lots"}},
        "tool_args.amount",
        id="revise-amount-not-a-number",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "amount": "1.234"}},
        "tool_args.amount",
        id="revise-amount-three-decimals",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "coupon": "FREE"}},
        "tool_args.coupon",
        id="revise-unknown-arg",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {"amount": "5.00", "reason": "x"}},
        "tool_args.order_id",
        id="revise-missing-arg",
    ),
    pytest.param(
        {"decision": "revise", "tool_args": {**PROPOSED, "order_id": "1003"}},
        "tool_args.order_id",
        id="revise-bad-order-id",
    ),
    pytest.param(
        {"decision": "approve", "tool_args": PROPOSED}, "tool_args", id="approve-with-tool-args"
    ),
    pytest.param(
        {"decision": "approve", "decided_by": "sue"}, "decided_by", id="unknown-field-decided-by"
    ),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_bad_body_is_400_validation_error_naming_the_field(
    refund_waiting, api, endpoint, body, field
):
    # given
    before = recorded(refund_waiting)

    # when
    response = endpoint.post(api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, **body)

    # then
    problem = assert_problem(response, 400, "validation_error")
    assert field in error_fields(problem), problem
    assert recorded(refund_waiting) == before


@pytest.mark.parametrize(
    "raw",
    ['{"decision": "approve"', "", "[1, 2]", '"approve"'],
    ids=["cut", "empty", "list", "str"],
)
def test_malformed_json_is_400_validation_error(refund_waiting, api, endpoint, raw):
    before = recorded(refund_waiting)

    response = endpoint.post_raw(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, raw
    )

    assert_problem(response, 400, "validation_error")
    assert recorded(refund_waiting) == before


def test_resume_without_interrupt_id_is_400(refund_waiting, api):
    response = api("sam").post(
        RESUME.url(refund_waiting.run.pk, ""), {"decision": "approve"}, format="json"
    )
    assert "interrupt_id" in error_fields(assert_problem(response, 400, "validation_error"))


# --- 422 -----------------------------------------------------------------------------------


def _drop(path: str):
    def tamper(snapshot: dict) -> dict:
        *parents, last = path.split(".")
        node = snapshot
        for name in parents:
            node = node[name]
        del node[last]
        return snapshot

    return tamper


TAMPERED = [
    pytest.param(_set("version", 1), "snapshot_version_unsupported", id="version-1"),
    pytest.param(_set("version", 4), "snapshot_version_unsupported", id="version-4"),
    # version 3 holds several calls (pending_tool_calls): a v2 body under it is invalid
    pytest.param(_set("version", 3), "snapshot_invalid", id="version-3-with-one-call"),
    pytest.param(_set("version", "2"), "snapshot_version_unsupported", id="version-string"),
    pytest.param(_drop("version"), "snapshot_version_unsupported", id="version-missing"),
    pytest.param(_drop("pending_tool_call.expires_at"), "snapshot_invalid", id="no-expires-at"),
    pytest.param(_drop("run_context"), "snapshot_invalid", id="no-run-context"),
    pytest.param(_drop("pending_tool_call"), "snapshot_invalid", id="no-pending-call"),
    pytest.param(
        _set("pending_tool_call.tool_args", '{"amount": "20.00"}'),
        "snapshot_invalid",
        id="tool-args-string",
    ),
    pytest.param(
        _set("pending_tool_call.expires_at", "next tuesday"), "snapshot_invalid", id="bad-date"
    ),
    # v2 times are UTC ("...Z"): a time without a zone cannot be compared with now
    pytest.param(
        _set("pending_tool_call.expires_at", "2026-03-03T12:00:00"),
        "snapshot_invalid",
        id="naive-expires-at",
    ),
    pytest.param(_set("pending_tool_call.status", "WAITING"), "snapshot_invalid", id="bad-status"),
    pytest.param(_set("pending_tool_call.decision", "maybe"), "snapshot_invalid", id="bad-dec"),
    pytest.param(_set("pending_tool_call.interrupt_id", 7), "snapshot_invalid", id="id-number"),
    pytest.param(_set("run_context.run_id", None), "snapshot_invalid", id="run-id-null"),
    pytest.param(_set("extra", {"x": 1}), "snapshot_invalid", id="extra-field"),
    pytest.param(lambda snapshot: ["not", "an", "object"], "snapshot_invalid", id="a-list"),
]


@pytest.mark.parametrize(("tamper", "code"), TAMPERED)
def test_tampered_snapshot_is_422_and_nothing_changes(refund_waiting, api, endpoint, tamper, code):
    # given: the stored snapshot is not an exact v2 snapshot any more
    tamper_snapshot(refund_waiting.run, tamper)
    before = recorded(refund_waiting)

    # when
    response = endpoint.post(
        api("sam"), refund_waiting.run.pk, refund_waiting.interrupt_id, decision="approve"
    )

    # then
    assert_problem(response, 422, code)
    assert recorded(refund_waiting) == before

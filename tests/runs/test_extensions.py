"""The runtime is extended without touching it: the test-only app tests/extension_app adds a
wait kind (a customer's sign-off), a graph node (its audit) and a script, and a run goes
through all of them over the API."""

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from runs import extensions, services, worker
from runs.extensions import PENDING_FIELD_TYPES, ExtensionError, Interrupt, WaitKind
from runs.models import RunEvent, RunStatus, ToolExecution
from runs.serializers import PENDING_FIELDS
from tests import factories
from tests.extension_app import signoff

pytestmark = pytest.mark.django_db

RUNTIME = Path(extensions.__file__).resolve().parent


def _work() -> None:
    worker.run_slices(services.runs_claim(limit=4))


def test_a_run_pauses_in_a_new_wait_kind_is_resumed_and_passes_a_new_node(parcel_shop, api):
    # given a shop whose release plays the sign-off script
    factories.release_publish(
        merchant=parcel_shop, model=f"scripted:{signoff.SCRIPT}", tools=[signoff.TOOL]
    )
    pat = api("pat", merchant="parcel-shop")

    # when pat asks and a worker runs the agent
    created = pat.post(
        "/api/v1/runs", {"message": "Ship the blue one"}, format="json", HTTP_IDEMPOTENCY_KEY="s1"
    )
    assert created.status_code == 201, created.content
    run_id = created.json()["id"]
    _work()

    # then the run waits in the new kind, shown as a pending item with the kind's own field
    waiting = pat.get(f"/api/v1/runs/{run_id}").json()
    assert waiting["status"] == RunStatus.WAITING_USER
    [pending] = waiting["pending"]
    assert pending["kind"] == "signoff"
    assert pending["tool_name"] == signoff.TOOL
    assert pending["tool_args"] == {"note": "Ship the blue one"}
    assert pending["note"] == "Ship the blue one"
    assert (pending["ticket_id"], pending["question"]) == (None, None)
    assert pending["expires_at"]

    # when pat signs off and a worker goes on
    answered = pat.post(
        f"/api/v1/runs/{run_id}/inputs",
        {
            "interrupt_id": pending["interrupt_id"],
            "run_version": waiting["version"],
            "text": "Yes, ship it",
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="sign-1",
    )
    assert answered.status_code == 202, answered.content
    _work()

    # then the audit node recorded the call's result once and the run finished with it
    done = pat.get(f"/api/v1/runs/{run_id}").json()
    assert (done["status"], done["pending"]) == (RunStatus.COMPLETED, [])
    assert done["result"] == "Signed off: Yes, ship it"
    [execution] = ToolExecution.objects.filter(run_id=run_id)
    assert (execution.tool, execution.result["text"]) == (signoff.TOOL, "Yes, ship it")
    types = list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
    )
    for expected in ("signoff.requested", "input.received", "signoff.audited", "run.completed"):
        assert expected in types
    assert types.index("input.received") < types.index("signoff.audited")


def test_the_new_kind_appears_in_the_openapi_schema():
    out = io.StringIO()
    call_command("spectacular", "--format", "openapi-json", stdout=out)
    pending = json.loads(out.getvalue())["components"]["schemas"]["Pending"]
    kinds = json.loads(out.getvalue())["components"]["schemas"]["KindEnum"]["enum"]

    assert "signoff" in kinds
    assert pending["properties"]["note"] == {"type": "string", "nullable": True}


def test_a_pending_field_of_a_type_no_client_reads_is_refused_when_registered():
    # given a wait kind whose pending field is a float (JSON clients would lose its digits)
    kind = WaitKind(
        name="weigh", payload=None, status=RunStatus.WAITING_USER, pending_fields={"weight": float}
    )

    # when its interrupt registers, then it is refused, naming the field and the types
    with pytest.raises(ExtensionError, match="'weight' of 'weigh' is a <class 'float'>"):
        extensions.interrupt_register(
            Interrupt(policy="weighing", pause=lambda **_: None, kinds=(kind,))
        )
    assert extensions.wait_kind("weigh") is None and extensions.interrupt_for("weighing") is None


def test_every_type_a_pending_field_may_have_is_rendered():
    assert set(PENDING_FIELDS) == set(PENDING_FIELD_TYPES)


def test_the_runtime_knows_neither_the_after_sales_domain_nor_the_extension():
    # The gate's own words too (escalations, votes, approval policies, four eyes, approver
    # groups, absences); "approval" and "policy" alone stay, as the run's status
    # WAITING_APPROVAL, the manifest's approval_ttl_seconds, a tool's policy and the error
    # code APPROVER_REVOKED are the runtime's (DESIGN, API).
    domain_words = re.compile(
        r"ticket|refund|exchange|ORD-|after.sales|proposal|sku|signoff|sign-off|escalat|vote"
        r"|parcel|locker|courier|voucher"
        r"|approval.polic|approver.group|four.eyes|absence",
        re.IGNORECASE,
    )
    found = [
        f"{path.relative_to(RUNTIME.parent)}:{number}: {line.strip()}"
        for path in RUNTIME.rglob("*")
        if path.is_file() and "migrations" not in path.parts and path.suffix in (".py", ".html")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if domain_words.search(line)
    ]
    assert found == []

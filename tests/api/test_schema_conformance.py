"""The API does what its OpenAPI schema says, checked by schemathesis against the live server
with a customer's key and a supervisor's: no 5xx, no status, header or body the schema does not
declare, nothing the schema forbids accepted, and nothing it accepts refused as malformed.

Bounded (25 examples per operation and phase) and seeded, so a run is the same every time; the
whole report of each key is kept in artifacts/."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User

from agentportal.models import Role
from agentportal.principals import Principal
from approvals import plans
from approvals.models import Approval, ApprovalStatus, BusinessEvent
from runs import worker
from runs.models import AgentRun, RunStatus
from tests import factories
from tests.approvals.plan_helpers import EXCHANGE, exchange_run, ticket_of

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACTS = Path(django_settings.BASE_DIR) / "artifacts"


def schemathesis_run(
    base: str, key: str, *, phases: str, max_examples: int, report: str, hooks: str = "checks"
) -> subprocess.CompletedProcess:
    """schemathesis against the live schema with `key`, every check, seeded, with the hooks of
    tests/api/schemathesis_`hooks`.py; its output is kept in artifacts/`report`.txt."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(Path(__file__).with_name("schemathesis.toml")),
            "run",
            f"{base}/api/v1/schema/?format=json",
            "--header",
            f"Authorization: Bearer {key}",
            "--checks",
            "all",
            # Replaced by tests/api/schemathesis_checks.py, which tells a refusal that depends
            # on state (404, 409) from a refusal of the request's form (400 validation_error).
            "--exclude-checks",
            "positive_data_acceptance",
            "--phases",
            phases,
            "--max-examples",
            str(max_examples),
            "--seed",
            "20261203",
            "--no-color",
        ],
        cwd=django_settings.BASE_DIR,
        env={**os.environ, "SCHEMATHESIS_HOOKS": f"tests.api.schemathesis_{hooks}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"{report}.txt").write_text(result.stdout + result.stderr)
    return result


# Rate limits fuzzing stays under (wrong keys included: the checks of authentication send some).
UNLIMITED = {
    "AGENTPORTAL_API_RATE": "1000000/minute",
    "AGENTPORTAL_AUTH_FAILURES_PER_MINUTE": "1000000",
}
# The demo's customer, a supervisor, and a service key of the shop (None).
KEYS = ["alice", "sam", None]


def key_of(username: str | None, demo) -> str:
    if username is None:
        return factories.api_key_for(None, demo, "service")
    return factories.api_key_for(User.objects.get(username=username), demo)


@pytest.mark.parametrize("username", KEYS)
def test_the_api_does_what_its_schema_says(username, demo, web_server):
    # given the product's web server, with rate limits fuzzing stays under, and a key of the
    # demo's customer, a supervisor or the shop's integration
    base = web_server(**UNLIMITED)
    key = key_of(username, demo)

    # when schemathesis runs every operation of the live schema
    result = schemathesis_run(
        base,
        key,
        phases="examples,coverage,fuzzing",
        # (CI's PostgreSQL pass asks for fewer: the schema is the same on both databases)
        max_examples=int(os.environ.get("AGENTPORTAL_SCHEMATHESIS_EXAMPLES", "25")),
        report=f"schemathesis-{username or 'service'}",
    )

    # then every case passed, and there were cases
    cases = re.search(r"(\d+) generated", result.stdout)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert cases is not None and int(cases[1]) > 500, result.stdout[-2000:]


def _waiting_work(demo) -> None:
    """Runs of the demo's customers at each kind of wait, for the stateful phase to reach:
    refunds waiting for a supervisor's approval, a plan waiting for its customer's confirmation
    and one waiting for a supervisor's review."""
    for customer, order in (("alice", "ORD-1003"), ("bob", "ORD-2002")):
        run = factories.run_queue(
            customer=User.objects.get(username=customer),
            merchant=demo,
            message=f"I want a refund for {order} amount 20",
        )
        worker.tick()
        assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL
    exchange_run(demo)
    reviewed = ticket_of(
        exchange_run(demo, EXCHANGE.replace("ORD-1002", "ORD-2001"), customer="bob")
    )
    bob = Principal(merchant=demo, role=Role.CUSTOMER, user=User.objects.get(username="bob"))
    plans.ticket_confirm(ticket=reviewed, principal=bob, proposal_version=1)
    plans.plan_reconcile(run_id=reviewed.run_id)


@pytest.mark.parametrize("username", KEYS)
def test_the_stateful_phase_follows_the_links_to_real_runs_approvals_and_tickets(
    username, demo, web_server
):
    # given runs waiting for people, the product's web server and a key of the demo's
    # customer, a supervisor or the shop's integration
    _waiting_work(demo)
    before = _decided()
    base = web_server(**UNLIMITED)
    key = key_of(username, demo)

    # when schemathesis chains operations along the schema's links (bounded: ~1 minute)
    result = schemathesis_run(
        base,
        key,
        phases="stateful",
        max_examples=30,
        report=f"schemathesis-stateful-{username or 'service'}",
        hooks="stateful",
    )

    # then every step passed, and the links led to real ids: several were followed and
    # something was decided
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    covered = re.search(r"API Links:\s+(\d+) covered", result.stdout)
    assert covered is not None and int(covered[1]) >= 5, result.stdout[-3000:]
    assert _decided() != before, result.stdout[-3000:]


def _decided() -> tuple[int, int]:
    """Decisions on calls and plans so far: approvals no longer pending, plan events."""
    return (
        Approval.objects.exclude(status=ApprovalStatus.PENDING_APPROVAL).count(),
        BusinessEvent.objects.count(),
    )

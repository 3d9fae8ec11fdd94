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

from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACTS = Path(django_settings.BASE_DIR) / "artifacts"


@pytest.mark.parametrize("username", ["alice", "sam"])
def test_the_api_does_what_its_schema_says(username, demo, web_server):
    # given the product's web server, with a rate limit fuzzing stays under, and a key of the
    # demo's customer or supervisor
    base = web_server(AGENTPORTAL_API_RATE="1000000/minute")
    key = factories.api_key_for(User.objects.get(username=username), demo)

    # when schemathesis runs every operation of the live schema
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
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
            "examples,coverage,fuzzing",
            "--max-examples",
            "25",
            "--seed",
            "20261203",
            "--no-color",
        ],
        cwd=django_settings.BASE_DIR,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_checks"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"schemathesis-{username}.txt").write_text(result.stdout + result.stderr)

    # then every case passed, and there were cases
    cases = re.search(r"(\d+) generated", result.stdout)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert cases is not None and int(cases[1]) > 500, result.stdout[-2000:]

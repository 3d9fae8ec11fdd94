"""AGENTPORTAL_LOG_FORMAT=json: one JSON object per log line, with the run and the shop a line
is about."""

import json
import logging
import os
import subprocess
import sys

import pytest

from agentportal.logs import JsonFormatter
from runs import worker
from tests import factories
from tests.conftest import ROOT

STATUS = "What is the status of order ORD-1001?"


@pytest.mark.django_db(transaction=True)
def test_a_line_about_a_run_carries_its_id_and_shop(demo, settings, caplog):
    # given a model endpoint nobody answers at
    settings.AGENTPORTAL = {
        **settings.AGENTPORTAL,
        "MODEL": "openai",
        "OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        "OPENAI_TIMEOUT_SECONDS": 2.0,
    }
    alice = demo.memberships.get(user__username="alice").user
    run = factories.run_queue(customer=alice, merchant=demo, message=STATUS)

    # when a worker tries its model call
    with caplog.at_level(logging.WARNING, logger="runs"):
        worker.tick()

    # then the warning names the run and its shop, and reads as one JSON object
    [record, *_] = [r for r in caplog.records if r.getMessage().startswith("model call for run")]
    line = json.loads(JsonFormatter().format(record))
    assert line["run_id"] == str(run.pk)
    assert line["shop"] == "demo-shop"
    assert line["level"] == "WARNING"
    assert line["logger"] == "runs.nodes"
    assert str(run.pk) in line["message"]
    assert "\n" not in JsonFormatter().format(record)


def test_an_exception_goes_into_its_line():
    try:
        raise ValueError("broken")
    except ValueError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )

    line = json.loads(JsonFormatter().format(record))

    assert "ValueError: broken" in line["exception"]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentportal.settings", **env},
        timeout=60,
    )


def test_the_setting_turns_every_line_into_json():
    done = _manage(
        "shell",
        "-c",
        "import logging; logging.getLogger('runs').warning('hello', extra={'run_id': 'r1'})",
        AGENTPORTAL_LOG_FORMAT="json",
    )

    [line] = [json.loads(text) for text in done.stderr.splitlines() if text.startswith("{")]
    assert line["message"] == "hello"
    assert line["run_id"] == "r1"


def test_an_unknown_log_format_is_refused_at_start_in_one_sentence():
    done = _manage("check", AGENTPORTAL_LOG_FORMAT="xml")

    assert done.returncode != 0
    assert "AGENTPORTAL_LOG_FORMAT must be plain or json, not 'xml'." in done.stderr

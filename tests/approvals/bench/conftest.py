import io
import json

import pytest
from django.core.management import call_command

from tests.conftest import database_url


@pytest.fixture
def bench(transactional_db, monkeypatch, tmp_path):
    """bench(*args) -> the JSON line of `manage.py bench *args`, on the test database: the
    workers and web servers it starts inherit DATABASE_URL from this process."""
    monkeypatch.setenv("DATABASE_URL", database_url())

    def run(*args: str) -> dict:
        out = io.StringIO()
        log = str(tmp_path / "processes.log")
        call_command("bench", *args, "--log", log, stdout=out, stderr=io.StringIO())
        return json.loads(out.getvalue().strip().splitlines()[-1])

    return run

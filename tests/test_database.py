import os

import pytest
from django.db import connection


@pytest.mark.django_db
def test_runs_on_the_database_ci_asked_for():
    # CI sets AGENTPORTAL_EXPECT_DATABASE for its PostgreSQL pass: this fails if that pass
    # quietly ran on SQLite.
    expected = os.environ.get("AGENTPORTAL_EXPECT_DATABASE", "sqlite")
    assert connection.vendor == expected

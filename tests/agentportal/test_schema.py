import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_openapi_schema_validates_without_warnings():
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    schema = out.getvalue()
    assert "/api/v1/runs/{run_id}/cancel" in schema
    assert "bearer" in schema

"""The product as its operators start it: `manage.py` in a process of its own, with the
product's settings (not the tests') and only the environment a test gives it."""

import os
import subprocess
import sys

from django.conf import settings


def manage(*args: str, timeout: float | None = None, **env: str) -> subprocess.CompletedProcess:
    """Run `manage.py args` with the product's settings. The tests' own DJANGO_* variables
    (their secret key, the browser tests' async switch) are left out; `env` adds to the rest.
    A command that outlives `timeout` seconds is an error (subprocess.TimeoutExpired)."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={
            **base,
            "DJANGO_SETTINGS_MODULE": "agentportal.settings",
            "AGENTPORTAL_DEMO_SECRET_KEY_FILE": "/nonexistent/demo-key",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )

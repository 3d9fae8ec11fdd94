"""The test settings: the product's, plus a test-only app that extends the runtime the way a
domain app does (tests/extension_app)."""

import os
import secrets

# The tests' own key, random for each run (a fixed one would be published, and the product
# refuses published keys with DEBUG off); the processes the tests start inherit it.
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
# The scripted model answers at once unless a test (or its cluster) asks it to stream.
os.environ.setdefault("AGENTPORTAL_SCRIPTED_STREAM_MS", "0")

from agentportal.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.extension_app"]  # noqa: F405
# How long the test extension's locker search takes (tests/extension_app/parcels.py); the
# clusters the tests start read it from their environment.
PARCEL_LOCKER_LATENCY_SECONDS = float(os.environ.get("PARCEL_LOCKER_LATENCY_SECONDS", "3"))

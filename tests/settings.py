"""The test settings: the product's, plus a test-only app that extends the runtime the way a
domain app does (tests/extension_app)."""

import os

# The tests' own key, so that they run on a fresh checkout without the demo's.
os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-" + "x" * 50)
# The scripted model answers at once unless a test (or its cluster) asks it to stream.
os.environ.setdefault("AGENTPORTAL_SCRIPTED_STREAM_MS", "0")

from agentportal.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.extension_app"]  # noqa: F405

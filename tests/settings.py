"""The test settings: the product's, plus a test-only app that extends the runtime the way a
domain app does (tests/extension_app)."""

from agentportal.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.extension_app"]  # noqa: F405

"""The after-sales app's settings, read from the environment once when Django's settings load
(into settings.AGENTPORTAL, where the code reads them and tests override them)."""

from typing import TypedDict

from agentportal.env import env_count, env_float, env_text


class ApprovalsSettings(TypedDict):
    STOCK_LATENCY_SECONDS: float
    FOLLOWUP_DUE_SECONDS: int
    DEMO_PASSWORD: str


def approvals_settings() -> ApprovalsSettings:
    return ApprovalsSettings(
        # How long the demo warehouse takes to answer a stock check (0: at once).
        STOCK_LATENCY_SECONDS=env_float("AGENTPORTAL_STOCK_LATENCY_SECONDS", 3.0, positive=False),
        # When a colleague is due to follow up on a create_followup_request.
        FOLLOWUP_DUE_SECONDS=env_count("AGENTPORTAL_FOLLOWUP_DUE_SECONDS", 24 * 3600),
        # The password `seed_demo` gives the demo's people.
        DEMO_PASSWORD=env_text("DEMO_PASSWORD", "demo"),
    )

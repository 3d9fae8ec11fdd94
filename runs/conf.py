"""The runtime's settings, read from the environment once when Django's settings load (into
settings.AGENTPORTAL, where the code reads them and tests override them)."""

from typing import TypedDict

from django.core.exceptions import ImproperlyConfigured

from agentportal.env import env_bool, env_count, env_float, env_int, env_text


class RunsSettings(TypedDict):
    MODEL: str
    OPENAI_BASE_URL: str
    OPENAI_API_KEY: str
    OPENAI_MODEL: str
    OPENAI_TIMEOUT_SECONDS: float
    MODEL_ATTEMPTS_PER_STEP: int
    APPROVAL_TTL_SECONDS: int
    SCRIPTED_STREAM_MS: int
    STREAM_DELTAS: bool
    TOOL_TIMEOUT_SECONDS: float
    RUN_DEADLINE_SECONDS: int
    WAIT_SECONDS: int
    SLICE_SECONDS: float
    LEASE_SECONDS: float
    TICK_CLAIM_SECONDS: float
    TICK_BUDGET_SECONDS: float
    WORKER_IN_FLIGHT: int
    ROUND_RUNS: int
    MODEL_CONCURRENCY: int
    TOOL_THREADS: int
    MODEL_THROTTLE_SECONDS: float
    CANCEL_POLL_SECONDS: float
    MAX_MODEL_CALLS: int
    MAX_STEPS: int
    MAX_TOOL_CALLS_PER_TURN: int
    MAX_OPEN_RUNS_PER_ACCOUNT: int
    MAX_OPEN_CONVERSATIONS_PER_CUSTOMER: int
    MAX_QUEUED_MESSAGES_PER_CUSTOMER: int
    MAX_EVENT_STREAMS_PER_KEY: int
    LISTEN_DATABASE_URL: str


def runs_settings(*, task_timeout: float, task_retry: float) -> RunsSettings:
    """The runtime's settings (DESIGN section 9; a merchant's release may narrow the limits).
    `task_timeout` and `task_retry`: django-q2's; a tick stays inside the one, which stays
    inside the other."""
    # Runs one worker process holds at once; their steps are committed together in rounds, and
    # their model calls wait on one event loop without a thread each.
    in_flight = env_count("AGENTPORTAL_WORKER_IN_FLIGHT", 256)
    found = RunsSettings(
        MODEL=env_text("AGENTPORTAL_MODEL", "scripted"),
        OPENAI_BASE_URL=env_text("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
        OPENAI_API_KEY=env_text("OPENAI_API_KEY", "not-needed"),
        OPENAI_MODEL=env_text("AGENTPORTAL_OPENAI_MODEL", "gpt-4o-mini"),
        OPENAI_TIMEOUT_SECONDS=env_float("AGENTPORTAL_OPENAI_TIMEOUT_SECONDS", 30.0),
        MODEL_ATTEMPTS_PER_STEP=env_count("AGENTPORTAL_MODEL_ATTEMPTS_PER_STEP", 2),
        APPROVAL_TTL_SECONDS=env_count("AGENTPORTAL_APPROVAL_TTL_SECONDS", 1800),
        # The scripted model writes its answers a word at a time, this many ms apart (0: at once).
        SCRIPTED_STREAM_MS=env_int("AGENTPORTAL_SCRIPTED_STREAM_MS", 20),
        # Publish the answers' text as the model writes it (runs.deltas); false: the clients
        # still stream from the model, but nothing is published and the answer shows when it
        # commits.
        STREAM_DELTAS=env_bool("AGENTPORTAL_STREAM_DELTAS", True),
        # How long a blocking tool call may take before it is abandoned (a tool may declare less).
        TOOL_TIMEOUT_SECONDS=env_float("AGENTPORTAL_TOOL_TIMEOUT_SECONDS", 30.0),
        RUN_DEADLINE_SECONDS=env_count("AGENTPORTAL_RUN_DEADLINE_SECONDS", 600),
        WAIT_SECONDS=env_count("AGENTPORTAL_WAIT_SECONDS", 24 * 3600),
        SLICE_SECONDS=env_float("AGENTPORTAL_SLICE_SECONDS", 120.0),
        LEASE_SECONDS=env_float("AGENTPORTAL_LEASE_SECONDS", 125.0),
        TICK_CLAIM_SECONDS=env_float("AGENTPORTAL_TICK_CLAIM_SECONDS", 20.0, positive=False),
        TICK_BUDGET_SECONDS=env_float("AGENTPORTAL_TICK_BUDGET_SECONDS", 110.0),
        WORKER_IN_FLIGHT=in_flight,
        # Steps committed together in one round, at most (measured: 16 is best on both
        # databases).
        ROUND_RUNS=env_count("AGENTPORTAL_ROUND_RUNS", 16),
        # Model calls in flight per endpoint and model, per worker process.
        MODEL_CONCURRENCY=env_count("AGENTPORTAL_MODEL_CONCURRENCY", in_flight),
        # Threads for tools that block (and for calls of stopped runs that ignore their token).
        TOOL_THREADS=env_count("AGENTPORTAL_TOOL_THREADS", 32),
        # How long a model call may keep waiting on an endpoint that answers 429.
        MODEL_THROTTLE_SECONDS=env_float("AGENTPORTAL_MODEL_THROTTLE_SECONDS", 300.0),
        CANCEL_POLL_SECONDS=0.25,
        MAX_MODEL_CALLS=6,
        MAX_STEPS=20,
        MAX_TOOL_CALLS_PER_TURN=4,
        MAX_OPEN_RUNS_PER_ACCOUNT=3,
        # A customer's open conversations, their messages waiting behind busy runs (all
        # conversations together), and event streams open at once per API key.
        MAX_OPEN_CONVERSATIONS_PER_CUSTOMER=env_count("AGENTPORTAL_MAX_OPEN_CONVERSATIONS", 10),
        MAX_QUEUED_MESSAGES_PER_CUSTOMER=env_count("AGENTPORTAL_MAX_QUEUED_MESSAGES", 20),
        MAX_EVENT_STREAMS_PER_KEY=env_count("AGENTPORTAL_MAX_EVENT_STREAMS_PER_KEY", 4),
        # Where a web process listens for the answers being written (runs.delta_channels):
        # the database itself, never a pooler in transaction mode. "": the database's own.
        LISTEN_DATABASE_URL=env_text("AGENTPORTAL_LISTEN_DATABASE_URL", ""),
    )
    _tick_fits(found, task_timeout=task_timeout, task_retry=task_retry)
    return found


def _tick_fits(found: RunsSettings, *, task_timeout: float, task_retry: float) -> None:
    """A tick claims within its budget and its slices end by it; a step still in flight then
    may take a tool's whole timeout, and all of it must end before django-q2 stops the task,
    which happens before the broker would hand the same task out again (DESIGN section 2)."""
    if task_timeout >= task_retry:
        raise ImproperlyConfigured(
            f"The worker task's timeout ({task_timeout:g} s) must stay under its retry"
            f" ({task_retry:g} s): the broker would hand a task still running out again."
        )
    if found["SLICE_SECONDS"] >= task_timeout:
        raise ImproperlyConfigured(
            f"AGENTPORTAL_SLICE_SECONDS ({found['SLICE_SECONDS']:g}) must stay under the worker"
            f" task's timeout ({task_timeout:g} s): a slice ends before its task is stopped."
        )
    claim, budget = found["TICK_CLAIM_SECONDS"], found["TICK_BUDGET_SECONDS"]
    if claim > budget:
        raise ImproperlyConfigured(
            f"AGENTPORTAL_TICK_CLAIM_SECONDS ({claim:g}) must not exceed"
            f" AGENTPORTAL_TICK_BUDGET_SECONDS ({budget:g}): a tick claims within its budget."
        )
    if budget + found["TOOL_TIMEOUT_SECONDS"] >= task_timeout:
        raise ImproperlyConfigured(
            f"AGENTPORTAL_TICK_BUDGET_SECONDS ({budget:g}) plus"
            f" AGENTPORTAL_TOOL_TIMEOUT_SECONDS ({found['TOOL_TIMEOUT_SECONDS']:g}) must stay"
            f" under the worker task's timeout ({task_timeout:g} s): a step in flight when the"
            " budget ends must finish before the task is stopped."
        )

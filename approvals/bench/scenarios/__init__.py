"""The bench's scenarios, a module each; importing this package registers them all."""

from approvals.bench.scenarios import (
    approval,
    auto_approval,
    llm,
    plain,
    plan,
    scale,
    stop,
    streams,
)

__all__ = ["approval", "auto_approval", "llm", "plain", "plan", "scale", "stop", "streams"]

"""The one registry of control commands (DESIGN 7). A message is parsed once, here; nothing
else special-cases a command.

A command is its policies: runs.command_apply.command_run applies them in one order (the
session, the pending messages, the active run); its reply only reports what they did.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agentportal import errors
from agentportal.principals import Principal
from runs import command_apply
from runs.command_apply import CommandOutcome
from runs.conversations import pending_count
from runs.models import AgentRun
from runs.serializers import RunSerializer

EVERYONE = frozenset({"customer", "supervisor", "operator", "service"})
SUPERVISORS = frozenset({"supervisor", "operator", "service"})


@dataclass(frozen=True)
class Command:
    """`active_run`: keep it, or cancel it. `pending`: what happens to the queued messages:
    keep them, drop them (a new generation), hold them, or queue the held ones again.
    `session`: keep the conversation, close it and open a new one, take it over, open it
    again, or make another one the current one. `argument`: the command takes one word."""

    name: str
    aliases: tuple[str, ...]
    active_run: Literal["keep", "cancel"]
    pending: Literal["keep", "drop", "hold", "requeue"]
    session: Literal["keep", "new", "take_over", "open", "switch"]
    roles: frozenset[str]
    reply: Callable[[CommandOutcome], dict[str, Any]]
    # Every command bypasses the agent's queue; a read-only one changes nothing at all.
    read_only: bool = False
    argument: bool = False


def _run_id(run) -> str | None:
    return str(run.pk) if run is not None else None


def _status(outcome: CommandOutcome) -> dict[str, Any]:
    active = outcome.conversation.active_run_id
    run = AgentRun.objects.filter(pk=active).first() if active else None
    return {
        "active_run": RunSerializer(run).data if run else None,
        "pending_messages": pending_count(outcome.conversation),
    }


COMMANDS: tuple[Command, ...] = (
    Command(
        name="/stop",
        aliases=(),
        active_run="cancel",
        pending="keep",
        session="keep",
        roles=EVERYONE,
        reply=lambda o: {
            "cancelled_run_id": _run_id(o.cancelled_run),
            "pending_messages": pending_count(o.conversation),
        },
    ),
    Command(
        name="/new",
        aliases=("/newsession", "/new-session"),
        active_run="cancel",
        pending="drop",
        session="new",
        roles=EVERYONE,
        reply=lambda o: {
            "conversation_id": str(o.current.pk),
            "cancelled_run_id": _run_id(o.cancelled_run),
            "dropped_messages": o.dropped,
        },
    ),
    Command(
        name="/reset",
        aliases=(),
        active_run="cancel",
        pending="drop",
        session="keep",
        roles=EVERYONE,
        reply=lambda o: {
            "cancelled_run_id": _run_id(o.cancelled_run),
            "dropped_messages": o.dropped,
        },
    ),
    Command(
        name="/switch",
        aliases=(),
        active_run="keep",
        pending="keep",
        session="switch",
        roles=EVERYONE,
        argument=True,
        reply=lambda o: {
            "conversation_id": str(o.current.pk),
            "detached_run_id": _run_id(o.detached_run),
        },
    ),
    Command(
        name="/status",
        aliases=(),
        active_run="keep",
        pending="keep",
        session="keep",
        roles=EVERYONE,
        reply=_status,
        read_only=True,
    ),
    Command(
        name="/takeover",
        aliases=(),
        active_run="cancel",
        pending="hold",
        session="take_over",
        roles=SUPERVISORS,
        reply=lambda o: {
            "cancelled_run_id": _run_id(o.cancelled_run),
            "control_version": o.conversation.control_version,
        },
    ),
    Command(
        name="/release",
        aliases=(),
        active_run="keep",
        pending="requeue",
        session="open",
        roles=SUPERVISORS,
        reply=lambda o: {"requeued_messages": o.requeued},
    ),
)

_BY_NAME = {name: command for command in COMMANDS for name in (command.name, *command.aliases)}


def command_parse(text: str, *, role: str) -> tuple[Command, str] | None:
    """The command a message is and its argument, or None for plain text. Unknown commands
    are refused here, never sent to the model, naming the commands `role` may use."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    word, _, argument = stripped.partition(" ")
    command = _BY_NAME.get(word.lower())
    if command is None:
        known = ", ".join(command.name for command in COMMANDS if role in command.roles)
        raise errors.UnknownCommand(f"{word.lower()} is not a command. Try one of {known}.")
    # Words after a command that takes none are ignored, as they always were.
    return command, argument.strip() if command.argument else ""


def command_allowed(command: Command, principal: Principal) -> None:
    if principal.role not in command.roles:
        raise errors.NotAllowed(f"{command.name} is not for your role.")


def command_execute(*, conversation, principal: Principal, text: str):
    """Parse and run a command sent to a conversation; None when `text` is plain text."""
    parsed = command_parse(text, role=principal.role)
    if parsed is None:
        return None
    command, argument = parsed
    command_allowed(command, principal)
    result = command_apply.command_run(
        conversation=conversation, principal=principal, command=command, argument=argument
    )
    return command, result

"""The one registry of control commands (DESIGN 7). A message is parsed once, here; nothing
else special-cases a command."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agentportal import errors
from agentportal.principals import Principal
from runs import conversations

EVERYONE = frozenset({"customer", "supervisor", "operator", "service"})
SUPERVISORS = frozenset({"supervisor", "operator", "service"})


@dataclass(frozen=True)
class Command:
    name: str
    aliases: tuple[str, ...]
    queue: Literal["queued", "bypass"]
    active_run: Literal["keep", "cancel"]
    pending: Literal["keep", "drop", "hold", "requeue"]
    session: Literal["keep", "new", "take_over", "open"]
    roles: frozenset[str]
    handler: Callable[[Any, Principal], dict[str, Any]]
    read_only: bool = False


COMMANDS: tuple[Command, ...] = (
    Command(
        name="/stop",
        aliases=(),
        queue="bypass",
        active_run="cancel",
        pending="keep",
        session="keep",
        roles=EVERYONE,
        handler=conversations.command_stop,
    ),
    Command(
        name="/new",
        aliases=("/newsession", "/new-session"),
        queue="bypass",
        active_run="cancel",
        pending="drop",
        session="new",
        roles=EVERYONE,
        handler=conversations.command_new,
    ),
    Command(
        name="/status",
        aliases=(),
        queue="bypass",
        active_run="keep",
        pending="keep",
        session="keep",
        roles=EVERYONE,
        handler=conversations.command_status,
        read_only=True,
    ),
    Command(
        name="/takeover",
        aliases=(),
        queue="bypass",
        active_run="cancel",
        pending="hold",
        session="take_over",
        roles=SUPERVISORS,
        handler=conversations.command_takeover,
    ),
    Command(
        name="/release",
        aliases=(),
        queue="bypass",
        active_run="keep",
        pending="requeue",
        session="open",
        roles=SUPERVISORS,
        handler=conversations.command_release,
    ),
)

_BY_NAME = {name: command for command in COMMANDS for name in (command.name, *command.aliases)}


def command_parse(text: str) -> Command | None:
    """The command a message is, or None for plain text. Unknown commands are refused here,
    never sent to the model."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    word = stripped.split()[0].lower()
    command = _BY_NAME.get(word)
    if command is None:
        known = ", ".join(command.name for command in COMMANDS)
        raise errors.UnknownCommand(f"{word} is not a command. Try one of {known}.")
    return command


def command_allowed(command: Command, principal: Principal) -> None:
    if principal.role not in command.roles:
        raise errors.NotAllowed(f"{command.name} is not for your role.")

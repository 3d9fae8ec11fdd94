"""The refusals a service can raise, in the domain's words. Services never speak HTTP: the
API, the pages and the admin turn these into what their users see, the API through the one
table in agentportal.problems (DOMAIN_PROBLEMS)."""

from typing import Any


class DomainError(Exception):
    """A service refused: `detail` says why in words a person can act on, `errors` lists
    field errors, `context` holds what else the caller may show (who decided first, ...)."""

    def __init__(
        self, detail: str = "", *, errors: list[dict[str, str]] | None = None, **context: Any
    ):
        super().__init__(detail)
        self.detail = detail
        self.errors = errors
        self.context = context


class InvalidInput(DomainError):
    """What was asked for is malformed or breaks a rule of its fields."""


class UnknownCommand(DomainError):
    pass


class NotAllowed(DomainError):
    """The caller's role may not do this."""


class NotFound(DomainError):
    """What was named does not exist for the caller (or is someone else's)."""


class InterruptMismatch(DomainError):
    """The answer is for something the run is not waiting for."""


class AlreadyDecided(DomainError):
    pass


class SameApprover(DomainError):
    """A call that needs two people already has this person's approval."""


class ArgumentsChanged(DomainError):
    """The decider saw other arguments than the ones now on the table (a colleague revised the
    call meanwhile), or did not say which they saw where it matters. `context` carries the
    current `tool_args` and `args_digest`."""


class VersionConflict(DomainError):
    """The caller acted on a version that is no longer current."""


class NotWaiting(DomainError):
    pass


class RunFinished(DomainError):
    pass


class InvalidTransition(DomainError):
    """The thing is not in a state that allows this."""


class IdempotencyKeyInFlight(DomainError):
    pass


class IdempotencyKeyReused(DomainError):
    pass


class ConversationClosed(DomainError):
    pass


class InterruptExpired(DomainError):
    pass


class SnapshotInvalid(DomainError):
    """A run's stored state is unusable; an operator must repair it."""


class SnapshotVersionUnsupported(SnapshotInvalid):
    pass


class TooManyOpenRuns(DomainError):
    pass


class TooManyOpenConversations(DomainError):
    pass


class TooManyQueuedMessages(DomainError):
    pass

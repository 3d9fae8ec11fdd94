"""Reading settings from the environment. Every reader names the variable and what it takes
when the value does not fit, so a mistyped setting stops the process at start with a
sentence an operator can act on, never a bare ValueError."""

import os
import sys

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"", "0", "false", "no", "off"}


# Every variable read through these readers, with the module that read it first: each app's
# settings list themselves here (agentportal.conf, runs.conf, approvals.conf; Django's own in
# agentportal.settings), and the tests hold the README's table to it.
READ: dict[str, str] = {}


def _raw(name: str) -> str | None:
    frame = sys._getframe(1)
    while frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    READ.setdefault(name, frame.f_globals.get("__name__", ""))
    return os.environ.get(name)


def _refused(name: str, wanted: str, raw: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name} must be {wanted}, not {raw!r}.")


def env_bool(name: str, default: bool = False) -> bool:
    raw = _raw(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in TRUE | FALSE:
        raise _refused(name, "1, true, yes or on (or 0, false, no, off)", raw)
    return value in TRUE


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """A whole number, `minimum` or more (0 unless said)."""
    raw = _raw(name)
    if raw is None:
        return default
    text = raw.strip()
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()) or int(text) < minimum:
        raise _refused(name, f"a whole number of {minimum} or more", raw)
    return int(text)


def env_count(name: str, default: int) -> int:
    """A whole number of 1 or more."""
    return env_int(name, default, minimum=1)


def env_float(name: str, default: float, *, positive: bool = True) -> float:
    """A number of seconds or the like: above 0 unless `positive` is False (then 0 or more)."""
    raw = _raw(name)
    if raw is None:
        return default
    wanted = "a number above 0" if positive else "a number of 0 or more"
    try:
        value = float(raw.strip())
    except ValueError:
        raise _refused(name, wanted, raw) from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise _refused(name, wanted, raw)
    if positive and value == 0:
        raise _refused(name, wanted, raw)
    return value


def env_text(name: str, default: str) -> str:
    raw = _raw(name)
    return default if raw is None else raw


def env_list(name: str, default: str) -> list[str]:
    """Comma-separated values, blanks left out."""
    return [item.strip() for item in env_text(name, default).split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = env_text(name, default)
    if raw not in choices:
        raise _refused(name, " or ".join(choices), raw)
    return raw


def env_redis_url(name: str) -> str:
    """A Redis URL, or "" when the variable is not set."""
    raw = env_text(name, "")
    if raw and not raw.startswith(("redis://", "rediss://")):
        raise _refused(name, "a redis:// or rediss:// URL", raw)
    return raw

"""The key that signs sessions, CSRF tokens and django-q2's queued tasks. A known key lets anyone
who can write a queue row run code in the worker, so with DEBUG off only DJANGO_SECRET_KEY is
read and a key published anywhere (in this code, in the tests, in the demo's file) is refused.
Read by the settings, before Django is set up."""

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# The key every process of a checkout shares when DEBUG is on and nothing else gives one.
DEBUG_KEY = "agentportal-debug-only-key"
PUBLISHED_KEYS = {"agentportal-insecure-development-key", DEBUG_KEY}
# Earlier tests' keys began so (the tests now make a random key per run).
PUBLISHED_PREFIXES = ("tests-only-",)


def _published(key: str) -> bool:
    return key in PUBLISHED_KEYS or key.startswith(PUBLISHED_PREFIXES)


def _file_key(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def secret_key_checked(*, given: str, debug: bool, demo_file: Path) -> str:
    """The key to use, `given` DJANGO_SECRET_KEY; with DEBUG on, the demo's file (made by
    `make demo`) or DEBUG_KEY when it is unset. With DEBUG off, a missing or published key
    stops the process at start with a sentence saying what to do."""
    key = given.strip()
    if debug:
        return key or _file_key(demo_file) or DEBUG_KEY
    demo_key = _file_key(demo_file)
    if not key and demo_key:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set, and the demo's key (.demo-secret-key) is read only "
            "with DJANGO_DEBUG on, as `make demo` runs: set DJANGO_SECRET_KEY to a long random "
            "secret."
        )
    if not key:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set: set it to a long random secret (or run `make demo`, "
            "which makes one for the demo)."
        )
    if _published(key):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is a published key (the development, debug or tests' key) that "
            "anyone can sign with: set it to a long random secret."
        )
    if key == demo_key:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is the demo's key (.demo-secret-key), which is for `make demo` "
            "with DJANGO_DEBUG on: set it to a long random secret."
        )
    return key

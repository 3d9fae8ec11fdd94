"""Signing in by password without holding a database connection while the password is hashed:
a hash takes about half a second of a core, and a flood of sign-ins that each held a pooled
connection through it left none to the API."""

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db import connections


class PasswordBackend(ModelBackend):
    """Django's, with the request's connections given back between reading the user and
    hashing the password (the next query takes one again)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        users = get_user_model()
        if username is None:
            username = kwargs.get(users.USERNAME_FIELD)
        if username is None or password is None:
            return None
        try:
            user = users._default_manager.get_by_natural_key(username)
        except users.DoesNotExist:
            connections_give_back()
            # Hashed all the same, so that an unknown name takes as long as a known one.
            users().set_password(password)
            return None
        connections_give_back()
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None


def connections_give_back() -> None:
    """Close the thread's open connections, which returns a pooled one to its pool; one in a
    transaction is kept, as closing it would lose the transaction."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()

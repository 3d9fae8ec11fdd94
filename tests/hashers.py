"""Password hashers for tests: they count what they hash, and take as long as a real one."""

import threading
import time

from django.contrib.auth.hashers import MD5PasswordHasher
from django.db import connections


class CountingHasher(MD5PasswordHasher):
    """MD5 (the demo's passwords verify as before) that counts every password it hashes, and
    those it hashed while its thread held a database connection, and takes `seconds` for
    each, as PBKDF2 does; it sleeps, so a flood of them leaves the machine's cores to the
    rest."""

    seconds = 0.05
    hashed = 0
    hashed_connected = 0
    _lock = threading.Lock()

    def encode(self, password, salt):
        connected = any(db.connection is not None for db in connections.all(initialized_only=True))
        with CountingHasher._lock:
            CountingHasher.hashed += 1
            CountingHasher.hashed_connected += connected
        time.sleep(self.seconds)
        return super().encode(password, salt)


class SlowHasher(CountingHasher):
    """As long as PBKDF2's default on this kind of machine (about half a second)."""

    seconds = 0.5

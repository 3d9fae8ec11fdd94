"""Password hashers for tests: they count what they hash, and take as long as a real one."""

import threading
import time

from django.contrib.auth.hashers import MD5PasswordHasher


class CountingHasher(MD5PasswordHasher):
    """MD5 (the demo's passwords verify as before) that counts every password it hashes and
    takes `seconds` for each, as PBKDF2 does; it sleeps, so a flood of them leaves the
    machine's cores to the rest."""

    seconds = 0.05
    hashed = 0
    _lock = threading.Lock()

    def encode(self, password, salt):
        with CountingHasher._lock:
            CountingHasher.hashed += 1
        time.sleep(self.seconds)
        return super().encode(password, salt)


"""The product's settings with a hasher as slow as PBKDF2 that sleeps instead of computing, for
a web server flooded with sign-ins in a test without taking the machine's cores."""

from agentportal.settings import *  # noqa: F403

PASSWORD_HASHERS = ["tests.hashers.SlowHasher"]

"""Counting what the runtime costs the database: statements and commits."""

from contextlib import contextmanager

from django.db import connection

WRITE_VERBS = ("INSERT", "UPDATE", "DELETE")


class Counter:
    """Counts SQL statements and commits on this process's connection."""

    def __init__(self) -> None:
        self.queries = 0
        self.commits = 0

    def __call__(self, execute, sql, params, many, context):
        self.queries += 1
        # Outside a transaction every write commits by itself (django-q2's enqueue does).
        if not connection.in_atomic_block and sql.lstrip().upper().startswith(WRITE_VERBS):
            self.commits += 1
        return execute(sql, params, many, context)

    @contextmanager
    def counting(self):
        original_commit = connection.commit

        def commit():
            self.commits += 1
            original_commit()

        connection.commit = commit
        try:
            with connection.execute_wrapper(self):
                yield self
        finally:
            del connection.commit

"""Shared by the tests of who may see, start and list runs (API.md): the runs' address, a
run's body, and a run started with an Idempotency-Key."""

RUNS = "/api/v1/runs"
BODY = {"message": "What is the status of order ORD-1001?"}


def post_run(client, key: str | None, body: dict | None = None):
    """POST a run, with `key` as its Idempotency-Key (None: without the header)."""
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post(RUNS, BODY if body is None else body, format="json", **headers)

"""A check for the schemathesis run (loaded with SCHEMATHESIS_HOOKS): a request the schema
accepts is never refused as malformed. Refusals that depend on state (an unknown id, a run that
has ended, a role) and other stated problems (`unknown_command`) are answers, not
disagreements."""

import schemathesis

MALFORMED = {"validation_error", "idempotency_key_missing"}


@schemathesis.check
def schema_valid_request_refused(ctx, response, case):
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if response.status_code != 400:
        return None
    problem = response.json()
    if problem.get("code") in MALFORMED:
        raise AssertionError(
            f"The schema accepts this request, the API refused it: {problem.get('detail')} "
            f"{problem.get('errors', '')}"
        )
    return None

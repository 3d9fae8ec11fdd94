"""Log lines as JSON objects (AGENTPORTAL_LOG_FORMAT=json), one per line, carrying the run and
the shop a line is about where the code knows them (`extra=about(run)`)."""

import json
import logging
from datetime import UTC, datetime
from typing import Any

# The attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def about(run, *, run_id=None) -> dict[str, Any]:
    """The `extra` of a log line about a run: its id and its shop (the shop's slug when the run
    came with its merchant loaded, else the shop's id; never a query). Without the run's row,
    its id alone."""
    if run is None:
        return {"run_id": str(run_id)}
    cached = type(run)._meta.get_field("merchant").is_cached(run)
    return {"run_id": str(run.pk), "shop": run.merchant.slug if cached else run.merchant_id}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        line.update((name, value) for name, value in vars(record).items() if name not in _STANDARD)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)

"""The answers' deltas heard as a web process hears them (runs.deltas: LISTEN/NOTIFY, Redis
pub/sub, or the files of the runs it watches on SQLite), and how long a customer waited for
the first of them."""

import asyncio
import threading
import time
import uuid

from django.conf import settings
from django.core.management.base import CommandError

from approvals.bench.measure import percentiles
from runs import delta_channels
from runs.models import RunEvent


class DeltaListener(threading.Thread):
    """Hears the answers' deltas as a web process does (runs.delta_channels.channel().listen), on an
    event loop of its own: when the first text of each model call, a (run, gen), was heard
    here and when its worker published it (epoch seconds, this machine's clock)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.channel = delta_channels.channel()
        self.first: dict[tuple[str, str], tuple[float, float]] = {}
        self.error: BaseException | None = None
        # A run id no run has: what listen() publishes to know the channel is heard.
        self.probe = f"bench-probe-{uuid.uuid4()}"
        # The runs the file channel reads (the broadcast ones hear every run anyway).
        self.watched: set[str] = {self.probe}
        self._heard_probe = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None

    def listen(self, timeout: float = 30.0) -> None:
        """Start, and return once a message published from now on is heard: on PostgreSQL
        and Redis, one published before the listener subscribed is not."""
        self.start()
        ends = time.monotonic() + timeout
        while True:
            # A call's end on a run that does not exist: a web process ignores it.
            self.channel.publish_in_transaction({"run": self.probe, "gen": "0.0", "done": True})
            if self._heard_probe.wait(0.1):
                return
            if self.error is not None or time.monotonic() > ends:
                raise CommandError(f"the delta channel was not heard: {self.error!r}")

    def watch_runs(self, pending):
        """A function that says whether runs are pending; on the file channel it also keeps
        the pending ones watched (a query of their ids each time)."""
        if self.channel.broadcast:
            return pending.exists

        def watched() -> bool:
            runs = {str(pk) for pk in pending.values_list("pk", flat=True)}
            self.watched = runs | {self.probe}
            return bool(runs)

        watched()
        return watched

    def run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._hear())
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as error:
            self.error = error
        finally:
            self._loop.close()

    async def _hear(self) -> None:
        while True:
            async for message in self.channel.listen(lambda: set(self.watched)):
                heard = time.time()
                if "text" in message:
                    self.first.setdefault((message["run"], message["gen"]), (heard, message["at"]))
                elif message.get("run") == self.probe:
                    self._heard_probe.set()
            # The file channel stops when it watches nothing; it watches the probe at least.
            await asyncio.sleep(delta_channels.FILE_POLL_SECONDS)

    def stop(self) -> None:
        if self.is_alive() and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
            self.join(timeout=10)
        forget = getattr(self.channel, "forget", None)
        if forget is not None:
            forget(self.probe)


def first_deltas(runs_of, first: dict[tuple[str, str], tuple[float, float]]) -> dict:
    """Per run, from the start of the model call that wrote its answer to the first text of
    that call heard. That call is the run's last one: its `model.requested` event is the run's
    last, and its gen ("step.attempt") the largest heard of the run, of the same step."""
    requested: dict[str, tuple[int, float]] = {}
    events = RunEvent.objects.filter(run__in=runs_of, type="model.requested").order_by("seq")
    for run_id, data, created_at in events.values_list("run_id", "data", "created_at"):
        requested[str(run_id)] = (data.get("step"), created_at.timestamp())
    calls: dict[str, tuple[tuple[int, int], float, float]] = {}
    for (run, gen), (heard, published) in first.items():
        step, _, attempt = gen.partition(".")
        key = (int(step), int(attempt))
        if run in requested and (run not in calls or key > calls[run][0]):
            calls[run] = (key, heard, published)
    first_ms, transit_ms = [], []
    for run, ((step, _), heard, published) in calls.items():
        requested_step, started = requested[run]
        if step == requested_step:
            first_ms.append((heard - started) * 1000)
            transit_ms.append((heard - published) * 1000)
    return {
        "stream_deltas": settings.AGENTPORTAL["STREAM_DELTAS"],
        "first_delta_ms": percentiles(first_ms) if first_ms else None,
        "first_delta_runs": len(first_ms),
        "publish_to_heard_ms": percentiles(transit_ms) if transit_ms else None,
    }

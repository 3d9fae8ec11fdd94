"""What the benchmark's scenarios share: percentiles and plain HTTP."""

import json
import queue
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request

# How many clients post_concurrently sends from at once.
CLIENTS = 32


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
    }


def post_json(base: str, key: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post_concurrently(base: str, requests: list[tuple[str, str, dict]]) -> dict:
    """POST every (key, path, body) from CLIENTS threads; rate, latency, statuses."""
    work: queue.Queue[tuple[str, str, dict]] = queue.Queue()
    for request in requests:
        work.put(request)
    latencies: list[float] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        while True:
            try:
                key, path, body = work.get_nowait()
            except queue.Empty:
                return
            started = time.perf_counter()
            try:
                post_json(base, key, path, body)
                status = 200
            except urllib.error.HTTPError as error:
                status = error.code
            except OSError:
                status = 0  # no answer at all: counted as an error
            with lock:
                latencies.append((time.perf_counter() - started) * 1000)
                statuses.append(status)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return {
        "count": len(statuses),
        "per_s": round(len(statuses) / wall, 1),
        **{f"{name}_ms": value for name, value in percentiles(latencies).items()},
        "statuses": {str(code): statuses.count(code) for code in sorted(set(statuses))},
    }


def with_spread(results: list[dict], figure: str) -> dict:
    """The result whose `figure` is the median of all, with `<figure>_spread`: each run's
    figure in order, min, median, max, and max - min as a percentage of the median."""
    ranked = sorted(results, key=lambda result: result[figure])
    median = ranked[(len(ranked) - 1) // 2]
    low, middle, high = ranked[0][figure], median[figure], ranked[-1][figure]
    return {
        **median,
        f"{figure}_spread": {
            "each": [result[figure] for result in results],
            "min": low,
            "median": middle,
            "max": high,
            "spread_pct": round(100 * (high - low) / middle, 1) if middle else None,
        },
    }

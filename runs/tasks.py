"""django-q2 entry points. Delivered at least once, so each is safe to run twice."""

from runs import services, worker


def tick() -> int:
    return worker.tick()


def maintain() -> dict[str, int]:
    return services.maintain()

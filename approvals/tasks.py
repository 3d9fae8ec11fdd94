"""django-q2 entry points of the approvals app. Each is safe to run twice."""

from approvals import notifications


def deliver_webhooks() -> int:
    return notifications.webhooks_deliver_due()

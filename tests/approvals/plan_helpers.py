"""Driving an exchange plan in tests: the worker in-process, the commands over the API."""

from django.contrib.auth.models import User

from approvals import plans
from approvals.models import Ticket
from runs import worker
from runs.models import AgentRun
from tests import factories

EXCHANGE = "I want to exchange the shoes from order ORD-1002 for size 43"


def exchange_run(demo, message: str = EXCHANGE, *, customer: str = "alice") -> AgentRun:
    """Queue an exchange and let a worker take it to its first wait."""
    run = factories.run_queue(
        customer=User.objects.get(username=customer), merchant=demo, message=message
    )
    worker.tick()
    run.refresh_from_db()
    return run


def ticket_of(run: AgentRun) -> Ticket:
    return Ticket.objects.get(run=run)


def command(client, ticket: Ticket, action: str, **body):
    body.setdefault("proposal_version", Ticket.objects.get(pk=ticket.pk).version)
    return client.post(f"/api/v1/tickets/{ticket.pk}/{action}", body, format="json")


def reconcile(run: AgentRun) -> int:
    """What the reconcile task does once the command commits (tests run without a cluster)."""
    applied = plans.plan_reconcile(run_id=run.pk)
    run.refresh_from_db()
    return applied

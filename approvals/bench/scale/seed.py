"""The scale scenario's history, written in bulk: shops with their customers and orders,
finished runs with their events, a tenth of them with a refund call decided long ago, and
one supervisor's inbox of PENDING pending calls made by the product itself.

Rows go in with COPY on PostgreSQL and executemany on SQLite, bypassing the ORM's per-object
work: a million runs with their events take minutes, not hours. Seeding is incremental: a
larger size adds to what a smaller one wrote, so one database holds every size in turn.
"""

import json
import random
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from agentportal.models import Membership, Merchant, Role
from agentportal.services import api_key_create
from approvals.models import Approval, ApprovalStatus, Decision, Order, OrderStatus
from runs import services, worker
from runs.models import AgentRun, Node, RunEvent, RunStatus

PREFIX = "scale"
SUPERVISOR = f"{PREFIX}-supervisor"
PENDING = 100  # calls waiting in the supervisor's inbox
CLAIMABLE = 20  # queued runs, for the claim to take (and give back)
CUSTOMERS = 2  # per shop; the supervisor's shop has PENDING + CLAIMABLE
SUPERVISED_SHARE = 0.1  # of the runs, in the supervisor's shop
APPROVAL_SHARE = 0.1  # of the runs, with a decided refund call
HISTORY_DAYS = 180  # the runs were created over this many days until now
EVENTS = ("run.queued", "run.started", "run.completed")
BATCH = 10_000
ORDER_BASE = 500_000
REFUND = "I want a refund for ORD-{number} amount 10"
QUESTION = "What is the status of order ORD-{number}?"  # answered at once


@dataclass
class Scale:
    """What the measurements need of the seeded history."""

    supervisor: User
    shop: Merchant
    api_key: str
    pending: list[Approval]


class _Rows:
    """Plain rows into one model's table, every column given."""

    def __init__(self, model, columns: list[str]):
        self.table = model._meta.db_table
        self.columns = [model._meta.get_field(name).column for name in columns]
        self.postgresql = connection.vendor == "postgresql"

    def write(self, rows: list[tuple]) -> None:
        names = ", ".join(f'"{column}"' for column in self.columns)
        with connection.cursor() as cursor:
            if self.postgresql:
                with cursor.cursor.copy(f'COPY "{self.table}" ({names}) FROM STDIN') as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(self.columns))
                cursor.executemany(f'INSERT INTO "{self.table}" ({names}) VALUES ({marks})', rows)


def _uuid(value: uuid.UUID):
    return value if connection.vendor == "postgresql" else value.hex


def _when(value):
    return connection.ops.adapt_datetimefield_value(value)


def scale_seed(*, shops: int, runs: int, seed: int = 31) -> Scale:
    """The history at `shops` shops and `runs` finished runs, adding to what is there."""
    now = timezone.now()
    _shops(shops, now)
    shop = Merchant.objects.get(slug=f"{PREFIX}-0")
    scale = _supervision(shop)
    have = AgentRun.objects.filter(
        merchant__slug__startswith=f"{PREFIX}-", status=RunStatus.COMPLETED
    ).count()
    if runs > have:
        _history(have, runs, now, random.Random(seed + have))
    return scale


def _shops(count: int, now) -> None:
    have = Merchant.objects.filter(slug__startswith=f"{PREFIX}-").count()
    if count <= have:
        return
    Merchant.objects.bulk_create(
        [
            Merchant(slug=f"{PREFIX}-{index}", name=f"Shop {index}", max_running_runs=PENDING * 2)
            for index in range(have, count)
        ],
        batch_size=BATCH,
    )
    made = dict(Merchant.objects.filter(slug__startswith=f"{PREFIX}-").values_list("slug", "pk"))
    customers = [
        (made[f"{PREFIX}-{index}"], number)
        for index in range(have, count)
        for number in range(PENDING + CLAIMABLE if index == 0 else CUSTOMERS)
    ]
    joined = _when(now)
    users = _Rows(
        User,
        [
            *("username", "password", "is_superuser", "is_staff", "is_active", "date_joined"),
            *("first_name", "last_name", "email"),
        ],
    )
    for start in range(0, len(customers), BATCH):
        users.write(
            [
                # "!": an unusable password; no one signs in as these customers.
                (f"{PREFIX}-{shop}-{number}", "!", False, False, True, joined, "", "", "")
                for shop, number in customers[start : start + BATCH]
            ]
        )
    _memberships_and_orders(customers, now)


def _memberships_and_orders(customers: list[tuple[int, int]], now) -> None:
    ids = dict(User.objects.filter(username__startswith=f"{PREFIX}-").values_list("username", "pk"))
    members = _Rows(Membership, ["user", "merchant", "role", "active", "created_at"])
    orders = _Rows(
        Order,
        [
            "merchant",
            "number",
            "customer",
            "status",
            "items",
            "total",
            "currency",
            "refunded",
            "placed_at",
        ],
    )
    items = json.dumps([{"sku": "SHOE-TRAIL-42", "quantity": 1, "unit_price": "89.90"}])
    placed = _when(now - timedelta(days=HISTORY_DAYS + 30))
    total, none = Decimal("89.90"), Decimal("0.00")
    if connection.vendor != "postgresql":  # SQLite keeps decimals as text
        total, none = str(total), str(none)
    rows = [(shop, number, ids[f"{PREFIX}-{shop}-{number}"]) for shop, number in customers]
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        members.write([(user, shop, Role.CUSTOMER.value, True, placed) for shop, _, user in batch])
        orders.write(
            [
                (
                    shop,
                    f"ORD-{ORDER_BASE + number}",
                    user,
                    OrderStatus.DELIVERED.value,
                    items,
                    total,
                    "EUR",
                    none,
                    placed,
                )
                for shop, number, user in batch
            ]
        )


def _supervision(shop: Merchant) -> Scale:
    """The supervisor of the first shop, with PENDING calls waiting for them, made by the
    product's own runs; and CLAIMABLE runs queued in that shop for the claim."""
    supervisor, made = User.objects.get_or_create(username=SUPERVISOR, defaults={"is_staff": True})
    if made:
        supervisor.set_unusable_password()  # signed in by the measurements' test client
        supervisor.save(update_fields=["password"])
        Membership.objects.create(user=supervisor, merchant=shop, role=Role.SUPERVISOR)
    customers = list(
        User.objects.filter(memberships__merchant=shop, memberships__role=Role.CUSTOMER).order_by(
            "pk"
        )
    )
    pending = Approval.objects.filter(merchant=shop, status=ApprovalStatus.PENDING_APPROVAL)
    if not pending.exists():
        for customer in customers[:PENDING]:
            content = REFUND.format(number=ORDER_BASE + int(customer.username.rsplit("-", 1)[1]))
            services.queue_run(
                merchant=shop, account=customer, messages=[{"role": "user", "content": content}]
            )
        unfinished = AgentRun.objects.filter(
            merchant=shop, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]
        )
        for _ in range(PENDING):
            if not unfinished.exists():
                break
            worker.tick()
    # Topped up at each size: the portal started for its memory ran the earlier ones.
    queued = AgentRun.objects.filter(merchant=shop, status=RunStatus.QUEUED).count()
    for customer in customers[PENDING + queued : PENDING + CLAIMABLE]:
        number = ORDER_BASE + int(customer.username.rsplit("-", 1)[1])
        services.queue_run(
            merchant=shop,
            account=customer,
            messages=[{"role": "user", "content": QUESTION.format(number=number)}],
        )
    return Scale(
        supervisor=supervisor,
        shop=shop,
        api_key=api_key_create(merchant=shop, role=Role.SUPERVISOR, user=supervisor)[1],
        pending=list(pending.select_related("run").order_by("created_at", "pk")),
    )


def _history(have: int, runs: int, now, rng: random.Random) -> None:
    """Finished runs `have` to `runs`, each with its EVENTS, some with a decided call."""
    shop = Merchant.objects.get(slug=f"{PREFIX}-0").pk
    customers: dict[int, list[tuple[int, str]]] = {}
    for merchant, user, name in Membership.objects.filter(
        merchant__slug__startswith=f"{PREFIX}-", role=Role.CUSTOMER
    ).values_list("merchant_id", "user_id", "user__username"):
        order = f"ORD-{ORDER_BASE + int(name.rsplit('-', 1)[1])}"
        customers.setdefault(merchant, []).append((user, order))
    others = [pk for pk in customers if pk != shop] or [shop]
    run_rows = _Rows(AgentRun, [*RUN_VALUES, "id", "merchant", "account", "messages", *RUN_TIMES])
    event_rows = _Rows(RunEvent, ["run", "seq", "type", "data", "created_at"])
    approval_rows = _Rows(Approval, [*APPROVAL_VALUES, *APPROVAL_VARYING])
    constants = tuple(RUN_VALUES.values())
    for start in range(have, runs, BATCH):
        batch_runs, batch_events, batch_approvals = [], [], []
        for index in range(start, min(runs, start + BATCH)):
            merchant = shop if rng.random() < SUPERVISED_SHARE else rng.choice(others)
            account, order = rng.choice(customers[merchant])
            created = now - timedelta(seconds=rng.uniform(3600, HISTORY_DAYS * 86400))
            finished = _when(created + timedelta(seconds=30))
            created = _when(created)
            run_id = _uuid(uuid.uuid4())
            question = REFUND.format(number=order.removeprefix("ORD-"))
            messages = json.dumps(
                [{"role": "user", "content": question}, {"role": "assistant", "content": "Done."}]
            )
            batch_runs.append(
                (*constants, run_id, merchant, account, messages, created, finished, finished)
            )
            batch_events += [
                (run_id, seq, kind, "{}", created) for seq, kind in enumerate(EVENTS, start=1)
            ]
            if rng.random() < APPROVAL_SHARE:
                arguments = json.dumps({"order_id": order, "amount": "10.00"})
                batch_approvals.append(
                    (
                        *APPROVAL_VALUES.values(),
                        f"{PREFIX}-{index}",
                        f"{PREFIX}:{index}:1:0",
                        run_id,
                        merchant,
                        arguments,
                        arguments,
                        finished,
                        finished,
                        created,
                        finished,
                    )
                )
        run_rows.write(batch_runs)
        event_rows.write(batch_events)
        approval_rows.write(batch_approvals)


# The columns every seeded run shares (enums as their values: psycopg's COPY would write a
# Python enum's name), and those each has its own value of (after these).
RUN_VALUES = {
    "status": RunStatus.COMPLETED.value,
    "next_node": Node.DONE.value,
    "step": 4,
    "graph_version": "scale",
    "release_snapshot": "{}",
    "domain_event_cursor": 0,
    "version": 4,
    "lease_token": 1,
    "lease_holder": "",
    "control_version": 1,
    "model_calls": 2,
    "last_event_seq": len(EVENTS),
    "idempotency_scope": "",
    "request_hash": "",
    "result": "Done.",
    "error_code": "",
    "error_detail": "",
}
RUN_TIMES = ["created_at", "updated_at", "finished_at"]
APPROVAL_VALUES = {
    "tool_name": "issue_refund",
    "args_digest": "",
    "status": ApprovalStatus.EXECUTED.value,
    "decision": Decision.APPROVE.value,
    "reason": "",
    "required_approvals": 1,
    "required_group": "",
    "decided_by_policy": False,
    "cancel_cause": "",
}
APPROVAL_VARYING = [
    "interrupt_id",
    "tool_execution_key",
    "run",
    "merchant",
    "proposed_args",
    "executed_args",
    "decided_at",
    "expires_at",
    "created_at",
    "updated_at",
]

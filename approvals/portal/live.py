"""Live pages: an open page holds one server-sent event stream that says when what the page
shows has changed (`changed`, then the page fetches its new part) and who else is looking at
it (`viewers`, a line of HTML swapped in place); a customer's chat also gets the answer being
written, as it is written (`delta`, approvals.portal.live_answers). A page nothing happens to makes
no requests.

Every page stream of a web process waits on one hub (per event loop, as the run event streams
do); once a second the hub reads the state of every watched page in a few statements, in a
thread of the loop's pool, and wakes the streams whose page changed (runs.live_hub). Who is
viewing is approvals.portal.presence's."""

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, F

from approvals import selectors
from approvals.models import Approval, ApprovalStatus, Ticket, TicketStatus
from approvals.portal import presence
from approvals.portal.live_answers import AnswerFollower
from runs import live_hub

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Topic:
    """A page's subject: `approval`, `ticket` (by primary key), `chat` or `inbox` (by the
    user whose page it is)."""

    kind: str
    key: str

    @property
    def has_viewers(self) -> bool:
        return self.kind in ("approval", "ticket")


@dataclass(frozen=True)
class PageState:
    digest: str
    viewers: tuple[str, ...] = ()
    # A chat's answer being written: its run, and the message whose row shows it.
    writing: tuple[str, int] | None = None


def _digest(parts: Iterable[object]) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


# --- what a page shows, read for many pages at once -----------------------------------------


def approval_digest(approval: Approval) -> str:
    """A call's page changes with its status, and with each approval given or escalation
    while it waits (a colleague's vote must reach the other supervisors' open pages), and
    with its run (the timeline, and the calls asked for together with it)."""
    votes = getattr(approval, "votes_given", None)
    if votes is None:
        votes = len(approval.votes.all())
    run_version = getattr(approval, "run_version", None)
    if run_version is None:
        run_version = approval.run.version
    return _digest(
        [approval.status, approval.updated_at, votes, approval.escalated_at, run_version]
    )


def ticket_digest(ticket: Ticket) -> str:
    return _digest([ticket.status, ticket.version, ticket.updated_at])


def _approval_states(keys: list[str]) -> dict[str, tuple[str, int, list[int]]]:
    """By approval: its page's digest, its shop, and no one else who may view it."""
    approvals = (
        Approval.objects.filter(pk__in=keys)
        .only("status", "updated_at", "escalated_at", "merchant")
        .annotate(votes_given=Count("votes"), run_version=F("run__version"))
    )
    return {
        str(approval.pk): (approval_digest(approval), approval.merchant_id, [])
        for approval in approvals
    }


def _ticket_states(keys: list[str]) -> dict[str, tuple[str, int, list[int]]]:
    """By plan: its page's digest, its shop, and its customer, who views it too."""
    tickets = Ticket.objects.filter(pk__in=keys).only(
        "status", "version", "updated_at", "merchant", "customer"
    )
    return {
        str(ticket.pk): (ticket_digest(ticket), ticket.merchant_id, [ticket.customer_id])
        for ticket in tickets
    }


def inbox_digest(user_id: str) -> str:
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        return ""
    approvals = selectors.approvals_for_supervisor(user=user).filter(
        status=ApprovalStatus.PENDING_APPROVAL
    )
    tickets = selectors.tickets_for_supervisor(user=user).filter(
        status__in=[TicketStatus.WAITING_REVIEW, TicketStatus.NEEDS_REVISION]
    )
    return _digest(
        [
            *approvals.annotate(votes_given=Count("votes"))
            .order_by("pk")
            .values_list("pk", "updated_at", "escalated_at", "votes_given"),
            *tickets.order_by("pk").values_list("pk", "version", "status"),
        ]
    )


def page_states(topics: Iterable[Topic]) -> dict[Topic, PageState]:
    """The state of each page: a digest of what it shows, and who is viewing it."""
    by_kind: dict[str, list[Topic]] = {}
    for topic in topics:
        by_kind.setdefault(topic.kind, []).append(topic)
    states: dict[Topic, PageState] = {}
    shared: dict[Topic, tuple[str, int, list[int]]] = {}
    for kind, read in (("approval", _approval_states), ("ticket", _ticket_states)):
        if kind in by_kind:
            found = read([topic.key for topic in by_kind[kind]])
            shared.update(
                {topic: found[topic.key] for topic in by_kind[kind] if topic.key in found}
            )
    chats = by_kind.get("chat", [])
    if chats:
        chat_states = selectors.chat_states(user_ids=[int(topic.key) for topic in chats])
        for topic in chats:
            chat = chat_states[int(topic.key)]
            states[topic] = PageState(chat.digest, writing=chat.writing)
    # A supervisor has one inbox open at a time, and there are few supervisors: one by one.
    for topic in by_kind.get("inbox", []):
        states[topic] = PageState(inbox_digest(topic.key))
    viewers = presence.viewers_of(
        {topic: (merchant, people) for topic, (_, merchant, people) in shared.items()}
    )
    for topic, (digest, _, _) in shared.items():
        states[topic] = PageState(digest, viewers.get(topic, ()))
    return states


# --- the hub ---------------------------------------------------------------------------------


class Watcher:
    """One page stream at the hub: the latest state read for its page."""

    def __init__(self) -> None:
        self.state: PageState | None = None
        self.ready = asyncio.Event()

    def deliver(self, state: PageState) -> None:
        if state != self.state:
            self.state = state
            self.ready.set()


def page_hub() -> live_hub.PollingHub:
    """The running event loop's hub of page streams."""
    return live_hub.loop_hub(
        "pages",
        lambda: live_hub.PollingHub(page_states, every=POLL_SECONDS, name="live pages"),
    )


# --- one page's stream -----------------------------------------------------------------------


async def page_stream(
    topic: Topic, *, user_id: int, username: str, seen: str, customer_of: str = ""
) -> AsyncIterator[str]:
    """`changed` when the page's digest is no longer `seen` (what the page was drawn from),
    `viewers` when the others viewing it change (told as viewers_html tells the page's
    customer when `customer_of` names the shop), and on a chat the answer being written as
    `delta` events (approvals.portal.live_answers); a comment line when quiet."""
    ends = live_hub.stream_deadline()
    mark: Callable[[], object] = sync_to_async(
        lambda: _mark_presence(topic, user_id, username), thread_sensitive=False
    )
    yield live_hub.sse_retry(2000)
    if topic.has_viewers:
        await mark()
    hub = page_hub()
    watcher = hub.join(topic, Watcher())
    answer = AnswerFollower(watcher.ready.set) if topic.kind == "chat" else None
    shown, shown_viewers = seen, ""
    try:
        while (remaining := ends - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(
                    watcher.ready.wait(), min(remaining, live_hub.KEEPALIVE_SECONDS)
                )
            except TimeoutError:
                if topic.has_viewers:
                    await mark()
                yield live_hub.KEEPALIVE
                continue
            watcher.ready.clear()
            # The text heard so far goes before the news that may replace it (a commit).
            if answer and (text := answer.take()):
                yield text
            state = watcher.state
            if state is None:
                continue
            if state.digest != shown:
                shown = state.digest
                yield live_hub.sse_event("changed", shown)
            others = presence.viewers_html(state.viewers, me=username, customer_of=customer_of)
            if others != shown_viewers:
                shown_viewers = others
                yield live_hub.sse_event("viewers", others)
            if answer:
                answer.follow(state.writing)
                if text := answer.take():
                    yield text
    finally:
        if answer:
            answer.close()
        hub.leave(topic, watcher)
        if topic.has_viewers:
            # Not awaited: the stream may be ending because its task was cancelled.
            asyncio.get_running_loop().run_in_executor(
                None, lambda: _clear_presence(topic, user_id)
            )


def _mark_presence(topic: Topic, user_id: int, username: str) -> None:
    try:
        presence.presence_mark(topic=topic, user_id=user_id, username=username)
    finally:
        connection.close()


def _clear_presence(topic: Topic, user_id: int) -> None:
    try:
        presence.presence_clear(topic=topic, user_id=user_id)
    finally:
        connection.close()

"""Live pages: an open page holds one server-sent event stream that says when what the page
shows has changed (`changed`, then the page fetches its new part) and who else is looking at
it (`viewers`, a line of HTML swapped in place); a customer's chat also gets the answer being
written, as it is written (`delta`, approvals.live_answers). A page nothing happens to makes
no requests.

Every page stream of a web process waits on one hub (per event loop, as the run event streams
do); once a second the hub reads the state of every watched page in a few statements, in a
thread of the loop's pool, and wakes the streams whose page changed. Who is viewing lives in
the shared cache, one key per page and person, so that every web node sees every viewer."""

import asyncio
import contextlib
import hashlib
import logging
import random
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, F
from django.utils.html import escape

from agentportal.models import Membership, Role
from approvals import selectors
from approvals.live_answers import AnswerFollower
from approvals.models import Approval, ApprovalStatus, Ticket, TicketStatus

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0
# As the run event streams: a stream ends after at most this long, less a random part of its
# last fifth, and says something on a quiet connection so that proxies keep it open.
STREAM_SECONDS = 300.0
STREAM_JITTER = 0.2
KEEPALIVE_SECONDS = 15.0
# A viewer whose stream stopped saying so (a web node killed) is forgotten after this long;
# a live stream says so again at each keep-alive.
PRESENCE_SECONDS = 3 * KEEPALIVE_SECONDS


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
    viewers = _viewers(
        {topic: (merchant, people) for topic, (_, merchant, people) in shared.items()}
    )
    for topic, (digest, _, _) in shared.items():
        states[topic] = PageState(digest, viewers.get(topic, ()))
    return states


# --- who is viewing --------------------------------------------------------------------------


def _presence_key(topic: Topic, user_id: int) -> str:
    return f"viewing:{topic.kind}:{topic.key}:{user_id}"


def presence_mark(*, topic: Topic, user_id: int, username: str) -> None:
    cache.set(_presence_key(topic, user_id), username, PRESENCE_SECONDS)


def presence_clear(*, topic: Topic, user_id: int) -> None:
    cache.delete(_presence_key(topic, user_id))


def _viewers(pages: dict[Topic, tuple[int, list[int]]]) -> dict[Topic, tuple[str, ...]]:
    """Who views each page, among the people who may: the shop's supervisors and operators,
    and the people the page names (a plan's customer); one read of the cache for all."""
    if not pages:
        return {}
    staff: dict[int, list[int]] = {}
    for merchant, user_id in Membership.objects.filter(
        merchant__in={merchant for merchant, _ in pages.values()},
        role__in=[Role.SUPERVISOR, Role.OPERATOR],
        active=True,
    ).values_list("merchant", "user"):
        staff.setdefault(merchant, []).append(user_id)
    keys = {
        topic: [_presence_key(topic, user_id) for user_id in {*staff.get(merchant, []), *people}]
        for topic, (merchant, people) in pages.items()
    }
    present = cache.get_many([key for page_keys in keys.values() for key in page_keys])
    return {
        topic: tuple(sorted(present[key] for key in page_keys if key in present))
        for topic, page_keys in keys.items()
    }


# --- the hub ---------------------------------------------------------------------------------


class Watcher:
    """One page stream at the hub: the latest state read for its page."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.state: PageState | None = None
        self.ready = asyncio.Event()

    def deliver(self, state: PageState) -> None:
        if state != self.state:
            self.state = state
            self.ready.set()


class PageHub:
    """The page streams of one event loop and the one task that reads for them; the task ends
    when the last stream does."""

    def __init__(self) -> None:
        self.watchers: dict[Topic, set[Watcher]] = {}
        self.wake = asyncio.Event()
        self.reader: asyncio.Task | None = None
        self.failing = False
        self.reads = 0

    def watch(self, topic: Topic) -> Watcher:
        watcher = Watcher(topic)
        self.watchers.setdefault(topic, set()).add(watcher)
        self.wake.set()
        if self.reader is None or self.reader.done():
            self.reader = asyncio.get_running_loop().create_task(self._read_while_watched())
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        watching = self.watchers.get(watcher.topic)
        if watching is not None:
            watching.discard(watcher)
            if not watching:
                del self.watchers[watcher.topic]

    async def _read_while_watched(self) -> None:
        read = sync_to_async(_read, thread_sensitive=False)
        while self.watchers:
            self.wake.clear()
            try:
                states = await read(list(self.watchers))
            except Exception:
                # The database is away: the pages keep what they show; read again later.
                if not self.failing:
                    logger.warning("live pages could not read; trying again", exc_info=True)
                self.failing, states = True, {}
            else:
                self.failing = False
            self.reads += 1
            for topic, state in states.items():
                for watcher in list(self.watchers.get(topic, ())):
                    watcher.deliver(state)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POLL_SECONDS)


def _read(topics: list[Topic]) -> dict[Topic, PageState]:
    """In a thread of the pool, which gives its database connection back."""
    try:
        return page_states(topics)
    finally:
        connection.close()


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PageHub]" = weakref.WeakKeyDictionary()


def page_hub() -> PageHub:
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = PageHub()
    return _hubs[loop]


# --- one page's stream -----------------------------------------------------------------------


def viewers_html(viewers: Iterable[str], *, me: str, customer_of: str = "") -> str:
    """Who else is viewing, by login for the shop's people; a page's customer (`customer_of`,
    the shop's name) reads only that people of the shop are there, never who."""
    others = [escape(name) for name in viewers if name != me]
    if not others:
        return ""
    if customer_of:
        shop = escape(customer_of)
        told = (
            f"A person of {shop} is looking at your plan"
            if len(others) == 1
            else f"People of {shop} are looking at your plan"
        )
        return f'<span class="viewing">{told}</span>'
    names = " and ".join([", ".join(others[:-1]), others[-1]] if len(others) > 1 else others)
    return f'<span class="viewing">{names} {"is" if len(others) == 1 else "are"} viewing</span>'


async def page_stream(
    topic: Topic, *, user_id: int, username: str, seen: str, customer_of: str = ""
) -> AsyncIterator[str]:
    """`changed` when the page's digest is no longer `seen` (what the page was drawn from),
    `viewers` when the others viewing it change (told as viewers_html tells the page's
    customer when `customer_of` names the shop), and on a chat the answer being written as
    `delta` events (approvals.live_answers); a comment line when quiet."""
    ends = time.monotonic() + STREAM_SECONDS * (1 - random.uniform(0, STREAM_JITTER))
    mark: Callable[[], object] = sync_to_async(
        lambda: _mark_presence(topic, user_id, username), thread_sensitive=False
    )
    yield "retry: 2000\n\n"
    if topic.has_viewers:
        await mark()
    hub = page_hub()
    watcher = hub.watch(topic)
    answer = AnswerFollower(watcher.ready.set) if topic.kind == "chat" else None
    shown, shown_viewers = seen, ""
    try:
        while (remaining := ends - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(watcher.ready.wait(), min(remaining, KEEPALIVE_SECONDS))
            except TimeoutError:
                if topic.has_viewers:
                    await mark()
                yield ": keep-alive\n\n"
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
                yield f"event: changed\ndata: {shown}\n\n"
            others = viewers_html(state.viewers, me=username, customer_of=customer_of)
            if others != shown_viewers:
                shown_viewers = others
                yield f"event: viewers\ndata: {others}\n\n"
            if answer:
                answer.follow(state.writing)
                if text := answer.take():
                    yield text
    finally:
        if answer:
            answer.close()
        hub.unwatch(watcher)
        if topic.has_viewers:
            # Not awaited: the stream may be ending because its task was cancelled.
            asyncio.get_running_loop().run_in_executor(
                None, lambda: _clear_presence(topic, user_id)
            )


def _mark_presence(topic: Topic, user_id: int, username: str) -> None:
    try:
        presence_mark(topic=topic, user_id=user_id, username=username)
    finally:
        connection.close()


def _clear_presence(topic: Topic, user_id: int) -> None:
    try:
        presence_clear(topic=topic, user_id=user_id)
    finally:
        connection.close()

"""Who is viewing a page: each open page stream says so in the shared cache (one key per page
and person, renewed at each keep-alive), so that every web node sees every viewer; and the
line a page shows of them."""

from collections.abc import Iterable
from typing import Protocol, TypeVar

from django.core.cache import cache
from django.utils.html import escape

from agentportal.models import Membership, Role
from runs.live_hub import KEEPALIVE_SECONDS

# A viewer whose stream stopped saying so (a web node killed) is forgotten after this long.
PRESENCE_SECONDS = 3 * KEEPALIVE_SECONDS


class Page(Protocol):
    """A page's subject: its kind (approval, ticket, ...) and key."""

    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str: ...


P = TypeVar("P", bound=Page)


def _presence_key(topic: Page, user_id: int) -> str:
    return f"viewing:{topic.kind}:{topic.key}:{user_id}"


def presence_mark(*, topic: Page, user_id: int, username: str) -> None:
    cache.set(_presence_key(topic, user_id), username, PRESENCE_SECONDS)


def presence_clear(*, topic: Page, user_id: int) -> None:
    cache.delete(_presence_key(topic, user_id))


def viewers_of(pages: dict[P, tuple[int, list[int]]]) -> dict[P, tuple[str, ...]]:
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

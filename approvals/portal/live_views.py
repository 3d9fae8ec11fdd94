"""The live pages' streams: each open page follows its own (approvals.portal.live says how)."""

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.views.decorators.cache import never_cache

from agentportal.admin import supervises_any
from approvals import selectors
from approvals.models import Ticket
from approvals.portal import live


@never_cache
async def approval_live(request, interrupt_id: str):
    def topic_of(user) -> live.Topic | None:
        found = selectors.approvals_for_supervisor(user=user).filter(interrupt_id=interrupt_id)
        pk = found.values_list("pk", flat=True).first()
        return live.Topic("approval", str(pk)) if pk else None

    return await _page_stream(request, topic_of)


@never_cache
async def ticket_live(request, ticket_id):
    def topic_of(user) -> live.Topic | None:
        ticket = selectors.ticket_for_user(user=user, ticket_id=ticket_id)
        return live.Topic("ticket", str(ticket.pk)) if ticket else None

    def customer_of(user, topic: live.Topic) -> str:
        """The shop's name when the plan is the person's own: who they see the staff as."""
        ticket = Ticket.objects.select_related("merchant").get(pk=topic.key)
        return ticket.merchant.name if ticket.customer_id == user.pk else ""

    return await _page_stream(request, topic_of, customer_of)


@never_cache
async def chat_live(request):
    def topic_of(user) -> live.Topic | None:
        return live.Topic("chat", str(user.pk)) if selectors.chat_principal(user=user) else None

    return await _page_stream(request, topic_of)


@never_cache
async def inbox_live(request):
    def topic_of(user) -> live.Topic | None:
        return live.Topic("inbox", str(user.pk)) if supervises_any(user) else None

    return await _page_stream(request, topic_of)


async def _page_stream(request, topic_of, customer_of=None) -> HttpResponse:
    """The page's stream of changes, for a signed-in person who may see the page;
    `customer_of` says the shop's name when the person is the page's customer."""
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponse("Sign in to follow this page.", status=403, content_type="text/plain")
    topic = await sync_to_async(_closing(topic_of))(user)
    if topic is None:
        raise Http404("Nothing to follow here.")
    shop = await sync_to_async(_closing(customer_of))(user, topic) if customer_of else ""
    response = StreamingHttpResponse(
        live.page_stream(
            topic,
            user_id=user.pk,
            username=user.get_username(),
            seen=request.GET.get("seen", ""),
            customer_of=shop,
        ),
        content_type="text/event-stream",
    )
    response["X-Accel-Buffering"] = "no"
    return response


def _closing(read):
    """`read`, giving its database connection back: a stream holds none while it waits."""

    def closing(*args):
        try:
            return read(*args)
        finally:
            connection.close()

    return closing

"""REST endpoints for conversations: open one, read it, send it a message or a command. Thin:
parse, call one selector or service, render."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from agentportal.problems import Problem
from agentportal.schema import ids_from, link, problems
from runs import commands, conversations, selectors
from runs.api import customer_for, principal_of
from runs.serializers import (
    ConversationCreateSerializer,
    ConversationSerializer,
    MessageCreateSerializer,
    MessagePageSerializer,
    MessageSerializer,
)

CONVERSATION_FROM = ids_from(
    link("conversations_create", 201, conversation_id="$response.body#/id")
)


def conversation_or_404(request, conversation_id):
    conversation = (
        selectors.conversations_visible_to(principal_of(request)).filter(pk=conversation_id).first()
    )
    if conversation is None:
        raise Problem(404, "not_found", "No such conversation.")
    return conversation


class ConversationsView(APIView):
    @extend_schema(
        operation_id="conversations_create",
        request=ConversationCreateSerializer,
        responses={201: ConversationSerializer},
        extensions=problems("too_many_open_conversations"),
    )
    def post(self, request):
        principal = principal_of(request)
        serializer = ConversationCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        customer = customer_for(principal, serializer.validated_data)
        conversation = conversations.conversation_create(
            merchant=principal.merchant, customer=customer
        )
        return Response(ConversationSerializer(conversation).data, status=status.HTTP_201_CREATED)


class ConversationDetailView(APIView):
    @extend_schema(
        operation_id="conversations_retrieve",
        responses=ConversationSerializer,
        extensions=CONVERSATION_FROM,
    )
    def get(self, request, conversation_id):
        return Response(ConversationSerializer(conversation_or_404(request, conversation_id)).data)


class ConversationMessagesView(APIView):
    @extend_schema(
        operation_id="conversations_messages",
        responses=MessagePageSerializer,
        extensions=CONVERSATION_FROM,
    )
    def get(self, request, conversation_id):
        conversation = conversation_or_404(request, conversation_id)
        messages = selectors.conversation_messages(conversation)
        return Response({"results": MessageSerializer(messages, many=True).data})

    @extend_schema(
        operation_id="conversations_send",
        request=MessageCreateSerializer,
        responses={202: OpenApiTypes.OBJECT, 200: OpenApiTypes.OBJECT},
        extensions=problems(
            "unknown_command",
            "conversation_closed",
            "run_finished",
            "too_many_open_runs",
            "too_many_queued_messages",
        )
        | CONVERSATION_FROM,
    )
    def post(self, request, conversation_id):
        principal = principal_of(request)
        conversation = conversation_or_404(request, conversation_id)
        serializer = MessageCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        text = serializer.validated_data["text"]
        executed = commands.command_execute(
            conversation=conversation, principal=principal, text=text
        )
        if executed is not None:
            command, result = executed
            return Response({"command": command.name, "result": result})
        if not (principal.is_customer or principal.is_service):
            raise Problem(403, "permission_denied", "Only the customer writes to the agent.")
        message = conversations.message_send(conversation=conversation, text=text)
        return Response(
            {
                "message": {"id": message.pk, "status": message.status},
                "run_id": str(message.run_id) if message.run_id else None,
            },
            status=status.HTTP_202_ACCEPTED,
        )

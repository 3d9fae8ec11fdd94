from datetime import datetime
from uuid import UUID

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentportal.serializers import (
    AccountField,
    InterruptIdField,
    StrictIntegerField,
    StrictSerializer,
    TextField,
)
from runs import extensions
from runs.conversations import pending_count
from runs.models import AgentRun, Conversation, ConversationMessage, ErrorCode, RunEvent, RunInput
from runs.selectors import run_pending


class RunCreateSerializer(StrictSerializer):
    message = TextField(min_length=1, max_length=4000)
    account = AccountField(required=False)


# The DRF field of each type a wait kind's pending field may have (PENDING_FIELD_TYPES).
PENDING_FIELDS = {
    str: serializers.CharField,
    int: serializers.IntegerField,
    bool: serializers.BooleanField,
    UUID: serializers.UUIDField,
    datetime: serializers.DateTimeField,
}


# A pending item: the interrupted call, and the fields the wait kinds add (runs.extensions),
# known once the apps are ready. (A comment, not a docstring: that would change the schema.)
class PendingSerializer(serializers.Serializer):
    interrupt_id = serializers.CharField()
    tool_name = serializers.CharField(allow_null=True)
    tool_args = serializers.DictField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)

    def get_fields(self):
        declared = super().get_fields()
        fields = {"interrupt_id": declared.pop("interrupt_id")}
        fields["kind"] = serializers.ChoiceField(extensions.pending_kind_names())
        fields.update(declared)
        for kind in extensions.wait_kinds():
            for name, kind_type in kind.pending_fields.items():
                fields[name] = PENDING_FIELDS[kind_type](allow_null=True)
        return fields


class RunSerializer(serializers.ModelSerializer):
    conversation_id = serializers.SerializerMethodField()
    pending = serializers.SerializerMethodField()
    error_code = serializers.SerializerMethodField()

    class Meta:
        model = AgentRun
        fields = [
            "id",
            "status",
            "next_node",
            "step",
            "version",
            "graph_version",
            "conversation_id",
            "pending",
            "result",
            "error_code",
            "created_at",
            "updated_at",
        ]

    def get_conversation_id(self, run: AgentRun) -> str | None:
        conversation_id = getattr(run, "conversation_id", None)
        return str(conversation_id) if conversation_id else None

    @extend_schema_field(PendingSerializer(many=True))
    def get_pending(self, run: AgentRun) -> list[dict]:
        return PendingSerializer(run_pending(run), many=True).data

    @extend_schema_field(serializers.ChoiceField(ErrorCode.choices, allow_null=True))
    def get_error_code(self, run: AgentRun) -> str | None:
        return run.error_code or None


class RunPageSerializer(serializers.Serializer):
    results = RunSerializer(many=True)
    next = serializers.CharField(allow_null=True)


class RunInputCreateSerializer(StrictSerializer):
    interrupt_id = InterruptIdField()
    run_version = StrictIntegerField(min_value=1)
    text = TextField(min_length=1, max_length=4000)


class ReceiptSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunInput
        fields = ["id", "interrupt_id", "kind", "idempotency_key", "source_event_id", "created_at"]


class ReceiptResultSerializer(serializers.Serializer):
    receipt = ReceiptSerializer()
    run = RunSerializer()


class RunEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunEvent
        fields = ["seq", "type", "data", "created_at"]


class RunEventsSerializer(serializers.Serializer):
    events = RunEventSerializer(many=True)
    last_seq = serializers.IntegerField()


class ConversationCreateSerializer(StrictSerializer):
    account = AccountField(required=False)


class ConversationSerializer(serializers.ModelSerializer):
    pending_messages = serializers.SerializerMethodField()

    class Meta:
        model = Conversation
        fields = ["id", "status", "active_run_id", "pending_messages", "control_version"]

    def get_pending_messages(self, conversation: Conversation) -> int:
        return pending_count(conversation)


class MessageCreateSerializer(StrictSerializer):
    text = TextField(min_length=1, max_length=4000)


class MessageSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField(allow_null=True)

    class Meta:
        model = ConversationMessage
        fields = ["id", "text", "status", "run_id", "created_at"]


class MessagePageSerializer(serializers.Serializer):
    results = MessageSerializer(many=True)

"""Strict request parsing shared by the API: unknown fields and wrong types are errors."""

import re

from rest_framework import serializers

from agentportal.problems import Problem

IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class TextField(StrictCharField):
    """What a person writes (a message, an answer): it must say something, not only blanks;
    it is kept as written."""

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data):
        text = super().to_internal_value(data)
        if not text.strip():
            self.fail("blank")
        return text


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField that refuses text, floats and booleans instead of converting them."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


def idempotency_key_from(request) -> str:
    key = request.headers.get("Idempotency-Key")
    if key is None or key == "":
        raise Problem(400, "idempotency_key_missing", "Send an Idempotency-Key header.")
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise Problem(
            400,
            "validation_error",
            "The Idempotency-Key must be 1 to 255 visible ASCII characters.",
            errors=[{"field": "Idempotency-Key", "message": "1 to 255 visible ASCII characters"}],
        )
    return key

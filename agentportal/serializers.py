"""Strict request parsing shared by the API: unknown fields and wrong types are errors."""

import re

from django.core.validators import RegexValidator
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from agentportal.problems import Problem

IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "pattern": f"^{IDEMPOTENCY_KEY.pattern}$"},
    OpenApiParameter.HEADER,
    required=True,
    description="1 to 255 visible ASCII characters; the same key and body replay the answer.",
)


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


# The characters str.strip() removes, spelled out: Python's \s and ECMAScript's (which reads
# the schema's patterns) differ on a few, so the schema and the API would disagree on them.
BLANKS = "".join(f"\\u{code:04x}" for code in range(0x10000) if chr(code).isspace())
# Something besides blanks, and no NUL (the parser refuses NUL first: said here for the schema).
NOT_BLANK = RegexValidator(
    f"^[{BLANKS}]*[^{BLANKS}\\u0000][^\\u0000]*$", message="This field may not be blank."
)


class TextField(StrictCharField):
    """What a person writes (a message, an answer): it must say something, not only blanks;
    it is kept as written."""

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, validators=[NOT_BLANK], **kwargs)


class InterruptIdField(StrictCharField):
    """The id of a pending call or question, as the run's `pending` lists it."""

    def __init__(self, **kwargs):
        super().__init__(min_length=1, max_length=64, validators=[NOT_BLANK], **kwargs)


class AccountField(StrictCharField):
    """The user name of the customer a service key acts for (Django's user name characters)."""

    def __init__(self, **kwargs):
        user_name = RegexValidator(r"^[\w.@+-]+$", message="A customer's user name.")
        super().__init__(min_length=1, max_length=150, validators=[user_name], **kwargs)


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField that refuses text, floats and booleans instead of converting them."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A BooleanField that takes JSON's true and false only, not "yes", 1 or "on"."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictEmailField(serializers.EmailField):
    """An EmailField that refuses numbers and booleans instead of turning them into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
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

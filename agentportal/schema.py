"""OpenAPI: how the bearer API keys appear in the schema, and the problems every operation
answers with, declared once here rather than on every view."""

from collections import defaultdict

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from agentportal.problems import CONTENT_TYPE, STATUSES


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "agentportal.auth.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key made by `manage.py create_api_key`.",
        }


# Any operation may answer these: a malformed request (a NUL byte, a bad parameter), a missing
# or revoked key, a role that may not act, an Accept it cannot serve, too many requests, a
# database that cannot be reached just now.
EVERY_OPERATION = (
    "validation_error",
    "not_authenticated",
    "permission_denied",
    "not_acceptable",
    "rate_limited",
    "service_unavailable",
)
WITH_PATH_PARAMETERS = ("not_found",)
WITH_BODY = ("payload_too_large", "unsupported_media_type")

# Text the API takes never holds a NUL character (PostgreSQL cannot store one): refused in
# bodies by the parser, in paths and queries by the middleware, and stated on every string.
NO_NUL = "^[^\\x00]*$"

PROBLEM = {
    "type": "object",
    "description": "An RFC 9457 problem; `code` is the stable machine name.",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string", "nullable": True},
        "code": {"type": "string"},
        "errors": {
            "type": "array",
            "description": "Field errors of a `validation_error`.",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                "required": ["field", "message"],
            },
        },
    },
    "required": ["type", "title", "status", "detail", "code"],
}

# Free JSON the API takes (a call's edited arguments): any JSON object whose text holds no NUL.
JSON_WITHOUT_NUL = {
    "JsonValue": {
        "nullable": True,
        "oneOf": [
            {"type": "string", "pattern": NO_NUL},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
            {"$ref": "#/components/schemas/ToolArguments"},
        ],
    },
    "ToolArguments": {
        "type": "object",
        "description": (
            "The tool's arguments, checked against its own schema. No key or text may hold a "
            "NUL character (OpenAPI 3.0 cannot state it of keys)."
        ),
        "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
    },
}

HEADERS = {
    401: {
        "WWW-Authenticate": {
            "description": "`Bearer`: send an API key.",
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait (with `rate_limited` and `too_many_streams`).",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
}


def problems(*codes: str) -> dict:
    """The problem codes an operation answers with besides the ones every operation may; for
    `extend_schema(extensions=problems(...))`. `problems_declared` turns them into responses."""
    return {"x-problems": list(codes)}


def link(source: str, status: int, *, body: dict[str, str] | None = None, **parameters: str):
    """Where an operation's parameters come from: the answer `status` of the operation
    `source`, read by runtime expressions (`$response.body#/id`); `body` fields are merged into
    the request body. Declared on the operation that takes the ids, put on the source's
    response as an OpenAPI link by `problems_declared`."""
    target: dict = {"parameters": parameters}
    if body:
        target["requestBody"] = body
    return {"source": source, "status": str(status), "link": target}


def ids_from(*links: dict) -> dict:
    """The links that lead to an operation; for `extend_schema(extensions=...)`."""
    return {"x-ids-from": list(links)}


def problems_declared(result, generator, request, public):
    """drf-spectacular postprocessing hook: every operation declares each problem it can
    answer with (status, problem schema, the codes it means) and the links of its answers, and
    request bodies forbid fields they do not name, as the API does."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = PROBLEM
    schemas.update(JSON_WITHOUT_NUL)
    for item in result["paths"].values():
        for operation in item.values():
            codes = [*EVERY_OPERATION, *operation.pop("x-problems", [])]
            parameters = operation.get("parameters", [])
            if any(parameter["in"] == "path" for parameter in parameters):
                codes.extend(WITH_PATH_PARAMETERS)
            for parameter in parameters:
                _no_nul(parameter["schema"])
            if "requestBody" in operation:
                codes.extend(WITH_BODY)
                _forbid_unknown_fields(schemas, operation["requestBody"])
            operation["responses"].update(_problem_responses(codes))
    _links_declared(result)
    return result


def _links_declared(result) -> None:
    """Each link an operation declares (`ids_from`) on the response it reads its ids from."""
    operations = {
        operation["operationId"]: operation
        for item in result["paths"].values()
        for operation in item.values()
    }
    for target, operation in operations.items():
        for declared in operation.pop("x-ids-from", []):
            response = operations[declared["source"]]["responses"][declared["status"]]
            links = response.setdefault("links", {})
            links[target] = {"operationId": target, **declared["link"]}


def _problem_responses(codes: list[str]) -> dict:
    by_status: dict[int, list[str]] = defaultdict(list)
    for code in codes:
        if code not in by_status[STATUSES[code]]:
            by_status[STATUSES[code]].append(code)
    responses = {}
    for status, status_codes in sorted(by_status.items()):
        response = {
            "description": "A problem: " + ", ".join(f"`{code}`" for code in status_codes) + ".",
            "content": {CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        if status in HEADERS:
            response["headers"] = HEADERS[status]
        responses[str(status)] = response
    return responses


def _forbid_unknown_fields(schemas: dict, request_body: dict) -> None:
    """Bodies name all their fields (a body of several shapes, each shape); one with a field
    it must have is required."""
    for media in request_body.get("content", {}).values():
        component = _component(schemas, media.get("schema", {}))
        if component is None:
            continue
        shapes = [_component(schemas, shape) for shape in component.get("oneOf", [])] or [component]
        for shape in shapes:
            _forbid_in(schemas, shape)
        if any(shape.get("required") for shape in shapes):
            request_body["required"] = True


def _forbid_in(schemas: dict, shape: dict) -> None:
    """This object names all its fields, and so do the objects its fields hold (a policy's
    bands)."""
    shape["additionalProperties"] = False
    _no_nul(shape)
    for field in shape.get("properties", {}).values():
        for held in (field, field.get("items", {})):
            component = _component(schemas, held)
            # (an object of named fields, not one that says what else it holds: tool_args)
            if component and "properties" in component and "additionalProperties" not in component:
                _forbid_in(schemas, component)


def _component(schemas: dict, schema: dict) -> dict | None:
    return schemas.get(schema.get("$ref", "").rpartition("/")[2])


def _no_nul(schema: dict) -> None:
    """A free string (no enum, format or pattern of its own), here or nested in this schema,
    states that it takes no NUL."""
    if schema.get("type") == "string" and not {"enum", "format", "pattern"} & set(schema):
        schema["pattern"] = NO_NUL
    nested = [*schema.get("properties", {}).values()]
    if "items" in schema:
        nested.append(schema["items"])
    for inner in nested:
        _no_nul(inner)

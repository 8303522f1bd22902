"""The OpenAPI 3 schema (/api/schema/): every HTTP endpoint under /api/ is in
it with its methods, it validates without a single generator warning, the
answers have exactly the documented fields, Swagger UI and Redoc load from
local static files, and the websocket protocol is documented beside it."""

from __future__ import annotations

import re
from io import StringIO

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from chat import consumers
from chat.models import Message, MessageRole, Turn, TurnEvent, TurnStatus
from chat.services import conversation_create

# Pages that show the schema; they are not API endpoints themselves.
DOC_PAGES = {"api-swagger-ui", "api-redoc"}


def _routes(patterns=None, prefix: str = ""):
    """(path as OpenAPI writes it, view callback, url name) of every URL pattern."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            yield "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route), entry.callback, entry.name


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def test_every_api_url_pattern_is_in_the_schema_with_its_methods(schema):
    api = [
        (path, view, name)
        for path, view, name in _routes()
        if path.startswith(("/api/", "/v1/")) and name not in DOC_PAGES
    ]
    assert len(api) >= 10
    missing = [path for path, _, _ in api if path not in schema["paths"]]
    assert missing == []
    for path, view, _ in api:
        cls = getattr(view, "cls", None)
        assert cls is not None, f"{path} is not a DRF view"
        methods = {m.lower() for m in cls().allowed_methods} - {"options", "head"}
        assert methods == set(schema["paths"][path]), path
    # Nothing documented that does not exist.
    assert set(schema["paths"]) == {path for path, _, _ in api}


def test_the_schema_validates_without_warnings(schema, tmp_path):
    validate_schema(schema)  # OpenAPI 3.0 JSON schema (drf-spectacular's bundled copy)
    # The generator's own warnings (an unresolvable serializer, a guessed
    # type) fail too: each would be a hole in the documentation.
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target), stderr=StringIO())
    assert yaml.safe_load(target.read_text())["openapi"].startswith("3.")


def test_token_authentication_is_declared(schema):
    assert schema["components"]["securitySchemes"]["apiToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["apiToken"]["description"],
    }
    # Managing tokens takes the browser session only.
    assert schema["paths"]["/api/tokens/"]["post"]["security"] == [{"cookieAuth": []}]
    assert {"apiToken": []} in schema["paths"]["/api/conversations/"]["get"]["security"]


def _component(schema, ref: str) -> dict:
    return schema["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _fields(schema, path: str, method: str = "get", status: str = "200") -> set[str]:
    body = schema["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    body = body.get("items", body)
    return set(_component(schema, body["$ref"])["properties"])


def _item_schemas(schema, path: str) -> dict:
    """The documented shape of a list's items: {None: component}, or for a
    list whose items differ by a discriminator (the timeline's `role`),
    {role: component}."""
    body = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["items"]
    if "$ref" in body:
        body = _component(schema, body["$ref"])
    if "oneOf" in body:
        mapping = body["discriminator"]["mapping"]
        return {value: _component(schema, ref) for value, ref in mapping.items()}
    return {None: body}


def _assert_documented(schema, path: str, items: list[dict]) -> None:
    shapes = _item_schemas(schema, path)
    for item in items:
        shape = shapes[item["role"]] if None not in shapes else shapes[None]
        assert set(item) <= set(shape["properties"]), (path, item)
        assert set(shape.get("required", [])) <= set(item), (path, item)


@pytest.mark.django_db
def test_answers_have_exactly_the_documented_fields(schema, personas, install_models):
    client = Client()
    client.force_login(personas.staff)
    conversation = conversation_create(owner=personas.staff, title="t")
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED)
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.USER, content="hi")
    TurnEvent.objects.create(
        turn=turn, seq=1, type="tool.started", payload={"call_id": "c1", "tool": "run_sql", "sql": "SELECT 1"}
    )
    TurnEvent.objects.create(
        turn=turn,
        seq=2,
        type="tool.finished",
        payload={"call_id": "c1", "tool": "run_sql", "outcome": "success", "row_count": 1, "duration_ms": 3},
    )
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.TOOL, tool_call_id="c1", content="[]")
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.ASSISTANT, content="one")
    failed = Turn.objects.create(conversation=conversation, status=TurnStatus.FAILED, error="broken")
    Message.objects.create(conversation=conversation, turn=failed, role=MessageRole.USER, content="again")
    base = f"/api/conversations/{conversation.pk}"
    checks = [
        ("/api/conversations/", "/api/conversations/"),
        ("/api/models/", "/api/models/"),
        (f"{base}/models/", "/api/conversations/{conversation_id}/models/"),
        (f"{base}/mentions/", "/api/conversations/{conversation_id}/mentions/"),
    ]
    for url, path in checks:
        items = client.get(url).json()
        assert items, url
        assert {frozenset(item) for item in items} == {frozenset(_fields(schema, path))}, url
    timeline = client.get(f"{base}/messages/").json()
    assert [item["role"] for item in timeline] == ["user", "step", "assistant", "user", "status"]
    _assert_documented(schema, "/api/conversations/{conversation_id}/messages/", timeline)
    detail = client.get(f"{base}/").json()
    assert set(detail) == _fields(schema, "/api/conversations/{conversation_id}/")
    created = client.post("/api/tokens/", {"name": "ci"}, content_type="application/json")
    assert created.status_code == 201
    assert set(created.json()) == _fields(schema, "/api/tokens/", "post", "201")
    listed = client.get("/api/tokens/").json()
    assert {frozenset(item) for item in listed} == {frozenset(_fields(schema, "/api/tokens/"))}


@pytest.mark.django_db
def test_schema_and_its_pages_are_served_from_local_files(django_user_model):
    client = Client()
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200 and response.json()["info"]["title"] == "OwlAI API"
    for url, asset in (
        ("/api/schema/swagger-ui/", "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"),
        ("/api/schema/redoc/", "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"),
    ):
        page = client.get(url).content.decode()
        assert f"/static/{asset}" in page, url
        assert finders.find(asset) is not None, asset
        # No script, style or font from anywhere but this server.
        assert not re.search(r"""(src|href)=["']https?://""", page), url
    # Swagger UI would show a badge fetched from its online validator.
    assert '"validatorUrl": null' in client.get("/api/schema/swagger-ui/").content.decode()


def test_the_websocket_protocol_is_documented_beside_the_schema(schema):
    description = schema["info"]["description"]
    assert "/ws/chat/<conversation id>/" in description
    from chat.protocol import ClientFrame, ServerEvent

    event_types = [member.value for member in ServerEvent]
    assert set(event_types) >= {"turn.accepted", "message.delta", "error", "state"}
    for event_type in [*event_types, *(member.value for member in ClientFrame)]:
        assert f"`{event_type}`" in description, event_type
    codes = [value for name, value in vars(consumers).items() if name.startswith("CLOSE_")]
    for code in codes:
        assert f"| {code} |" in description, code
    assert "Authorization: Bearer" in description

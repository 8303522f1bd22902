"""Admin screens: providers read-only, models toggled, DSNs never shown back."""

from __future__ import annotations

import pytest
from django.urls import reverse

from chat.models import Message
from chat.services import conversation_create
from chat.turns.start import turn_start
from governance.field_crypto import decrypt_text
from governance.models import DbConnection, LlmModel, Provider
from governance.services import install_config_sync
from owlai.install_config import parse_install_config
from tests.support.confirm import post_confirmed

pytestmark = pytest.mark.django_db

CONFIG = """
[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "http://10.0.0.5:8000/v1"
models = ["qwen"]
"""


@pytest.fixture
def admin_client(client, personas):
    install_config_sync(config=parse_install_config(CONFIG))
    client.force_login(personas.admin)
    return client


@pytest.mark.parametrize(
    "name",
    [
        "governance_provider",
        "governance_llmmodel",
        "governance_featuredefault",
        "governance_dbconnection",
        "governance_role",
        "chat_conversation",
        "audit_toolcallaudit",
    ],
)
def test_changelists_load(admin_client, name):
    response = admin_client.get(reverse(f"admin:{name}_changelist"))
    assert response.status_code == 200


def test_provider_cannot_be_changed_in_admin(admin_client):
    provider = Provider.objects.get(name="onprem")
    url = reverse("admin:governance_provider_change", args=[provider.pk])
    page = admin_client.get(url)
    assert page.status_code == 200 and b"private" in page.content.lower()
    admin_client.post(url, {"name": "onprem", "kind": "openai", "tier": "public", "base_url": "http://x"})
    provider.refresh_from_db()
    assert provider.tier == "private"
    assert admin_client.get(reverse("admin:governance_provider_add")).status_code == 403


def test_model_enabled_flag_is_editable(admin_client):
    model = LlmModel.objects.get(name="qwen")
    url = reverse("admin:governance_llmmodel_change", args=[model.pk])
    response = post_confirmed(admin_client, url, {"enabled": ""})
    assert response.status_code == 302
    model.refresh_from_db()
    assert model.enabled is False


def test_stored_dsn_is_write_only(admin_client):
    secret = "postgresql://reader:s3cret-pw@db.internal:5432/sales"
    response = admin_client.post(
        reverse("admin:governance_dbconnection_add"),
        {
            "name": "crm",
            "business_summary": "CRM",
            "engine": "postgresql",
            "exposure": "internal_only",
            "dsn_env": "",
            "stored_dsn": secret,
            "row_cap": 100,
            "statement_timeout_ms": 5000,
            "grants-TOTAL_FORMS": 0,
            "grants-INITIAL_FORMS": 0,
        },
    )
    assert response.status_code == 302, response.content[:2000]
    connection = DbConnection.objects.get(name="crm")
    assert secret not in connection.dsn_encrypted and decrypt_text(connection.dsn_encrypted) == secret
    page = admin_client.get(reverse("admin:governance_dbconnection_change", args=[connection.pk]))
    assert b"s3cret-pw" not in page.content and b"db.internal" not in page.content
    # Saving without a new value keeps the stored one.
    admin_client.post(
        reverse("admin:governance_dbconnection_change", args=[connection.pk]),
        {
            "name": "crm",
            "business_summary": "CRM 2",
            "engine": "postgresql",
            "exposure": "internal_only",
            "dsn_env": "",
            "stored_dsn": "",
            "row_cap": 100,
            "statement_timeout_ms": 5000,
        },
    )
    connection.refresh_from_db()
    assert connection.business_summary == "CRM 2" and decrypt_text(connection.dsn_encrypted) == secret


def test_connection_without_any_dsn_source_is_refused(admin_client):
    response = admin_client.post(
        reverse("admin:governance_dbconnection_add"),
        {
            "name": "nodsn",
            "engine": "sqlite",
            "dsn_env": "",
            "stored_dsn": "",
            "row_cap": 10,
            "statement_timeout_ms": 10,
        },
    )
    assert response.status_code == 200 and not DbConnection.objects.filter(name="nodsn").exists()


def test_conversation_admin_shows_metadata_never_messages(admin_client, personas):
    conversation = conversation_create(owner=personas.staff)
    turn_start(conversation=conversation, user=personas.staff, text="비밀 질문 내용 xyzzy", model=None)
    assert Message.objects.filter(content__contains="xyzzy").exists()
    listing = admin_client.get(reverse("admin:chat_conversation_changelist"))
    detail = admin_client.get(reverse("admin:chat_conversation_change", args=[conversation.pk]))
    assert detail.status_code == 200
    for page in (listing, detail):
        assert b"xyzzy" not in page.content
    assert personas.staff.username.encode() in listing.content

"""The DB connection's change page says what schema analysis found of the
customer database's own code (functions, operators, casts), SECURITY
DEFINER ones marked: statements are bound to the catalog and never call
it, but whoever grants the connection should know it is there."""

from __future__ import annotations

import pytest
from django.urls import reverse

from governance.models import DbConnection

pytestmark = pytest.mark.django_db


def _page(admin_client, connection: DbConnection) -> str:
    url = reverse("admin:governance_dbconnection_change", args=[connection.pk])
    response = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    return response.content.decode()


def test_the_change_page_lists_the_database_code_and_marks_security_definer(admin_client) -> None:
    connection = DbConnection.objects.create(name="shop", engine="sqlite", business_summary="Shop")
    connection.database_code = [
        {"kind": "function", "name": "public.lower(text)", "security_definer": False, "extension": ""},
        {"kind": "function", "name": "public.audit_write()", "security_definer": True, "extension": ""},
        {"kind": "operator", "name": "public.||(text,text)", "security_definer": False, "extension": "hstore"},
    ]
    connection.save(update_fields=["database_code"])
    page = _page(admin_client, connection)
    assert "public.audit_write()</code> SECURITY DEFINER" in page
    assert "public.lower(text)</code></li>" in page  # not marked
    assert "(hstore)" in page
    assert "1 of them SECURITY DEFINER" in page or "SECURITY DEFINER 1" in page


def test_before_analysis_and_with_none_the_page_says_so(admin_client) -> None:
    connection = DbConnection.objects.create(name="fresh", engine="sqlite", business_summary="Fresh")
    assert "not analysed yet" in _page(admin_client, connection) or "아직 분석하지" in _page(admin_client, connection)
    connection.database_code = []
    connection.save(update_fields=["database_code"])
    page = _page(admin_client, connection)
    assert "none in the connection" in page or "연결의 스키마에 없습니다" in page

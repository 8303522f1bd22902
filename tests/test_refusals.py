"""Refusals are structured end to end: the check that refuses states a
message id and its parameters; the audit row keeps the fixed English form,
the model and the person read the same structure in their language."""

from __future__ import annotations

import json
import pickle
import re
import uuid

import pytest
from django.utils import translation
from django.utils.translation import gettext_noop

from audit.models import ToolCallAudit
from chat.context import TurnContext
from chat.executor import execute_tool_call
from chat.executor.reasons import Refused
from governance.refusals import REFUSED_FRAME, WITHHELD, Phrase, Reason, Unrecorded, localize
from governance.sql.guard import analyse_sql
from tests.sql_cases import MUST_DENY

HANGUL = re.compile(r"[\uac00-\ud7a3]")


def test_a_reason_is_its_audit_text_and_keeps_its_structure():
    reason = Reason(gettext_noop("function not allowed: %(sql)s"), sql="pg_sleep")
    assert reason == "function not allowed: pg_sleep" and reason.for_audit() == "function not allowed: pg_sleep"
    assert type(reason.for_audit()) is str
    # str() and an exception carrying it keep the structure (the SQL tool
    # re-raises checks' errors as str(error)).
    assert str(reason) is reason and str(ValueError(reason)) is reason
    assert Phrase(reason) is reason
    assert (reason.msgid, dict(reason.params)) == ("function not allowed: %(sql)s", {"sql": "pg_sleep"})
    copy = pickle.loads(pickle.dumps(reason))
    assert copy == reason and copy.msgid == reason.msgid
    assert json.loads(json.dumps({"r": reason})) == {"r": "function not allowed: pg_sleep"}


def test_nested_reasons_render_each_part_in_the_readers_language():
    inner = analyse_sql("DELETE FROM t", "postgres").reason
    outer = Reason(gettext_noop("not a read-only query: %(reason)s"), reason=Phrase(inner))
    assert outer.for_audit() == "not a read-only query: write statement: DELETE"
    with translation.override("ko"):
        assert outer.render() == "읽기 전용 쿼리가 아닙니다: 쓰기는 허용되지 않습니다(DELETE)"
    with translation.override("en"):
        assert outer.render() == "not a read-only query: writing is not allowed (DELETE)"


def test_what_the_model_wrote_reaches_the_model_but_not_the_audit_row():
    reason = Reason(gettext_noop("unknown argument %(path)s"), path=Unrecorded("x' OR 1=1"))
    assert reason.for_audit() == f"unknown argument {WITHHELD}"
    assert "x' OR 1=1" in reason.for_model()


@pytest.mark.parametrize(("dialect", "sql"), sorted({(c[0], c[1]) for c in MUST_DENY}))
def test_every_guard_refusal_is_a_translated_message(dialect, sql):
    """A guard reason without a catalog entry would reach a Korean reader in
    English: each one's message id has a Korean translation."""
    reason = analyse_sql(sql, dialect).reason
    assert isinstance(reason, Reason), reason
    with translation.override("ko"):
        assert HANGUL.search(translation.gettext(reason.msgid)), reason.msgid


def test_the_parse_errors_english_detail_stays_in_the_audit_only():
    reason = analyse_sql("SELECT FROM WHERE (", "postgres").reason
    assert reason.for_audit().startswith("parse error: ")
    with translation.override("ko"):
        korean = reason.render()
    assert HANGUL.search(korean) and "parse error" not in korean


def test_localize_renders_a_reason_and_drops_the_frame_in_both_forms():
    refusal = Reason(gettext_noop("no permission to read table(s): %(tables)s"), tables="salaries")
    with translation.override("ko"):
        as_model_read_it = translation.gettext(REFUSED_FRAME) % {"reason": refusal.for_model()}
        assert localize(as_model_read_it) == localize(Reason(REFUSED_FRAME, reason=refusal)) == refusal.render()
        assert localize(refusal) == "테이블을 읽을 권한이 없습니다: salaries"
    with translation.override("en"):
        assert localize("refused: " + refusal.for_model()) == refusal.render()


def ctx_for(user) -> TurnContext:
    return TurnContext(
        user_id=user.pk,
        username=user.username,
        tier="private",
        model_name="m",
        provider_name="p",
        conversation_id=uuid.uuid4(),
        turn_id=7,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("connection", "sql", "audit", "korean"),
    [
        (
            "sales",
            "DELETE FROM customers",
            "not a read-only query: write statement: DELETE",
            "읽기 전용 쿼리가 아닙니다: 쓰기는 허용되지 않습니다(DELETE)",
        ),
        (
            "partial",
            "SELECT * FROM orders",
            "no permission to read table(s): orders",
            "테이블을 읽을 권한이 없습니다: orders",
        ),
    ],
)
def test_a_refused_call_is_recorded_in_english_and_read_in_the_turns_language(
    personas, connection, sql, audit, korean, monkeypatch
):
    monkeypatch.setattr("chat.executor.tools.sql.execute_readonly", lambda **kw: pytest.fail("ran"))
    with translation.override("ko"):
        result = execute_tool_call(
            ctx_for(personas.staff), name="run_sql", arguments=json.dumps({"connection": connection, "sql": sql})
        )
        shown = localize(result.reason)
    assert ToolCallAudit.objects.get().reason == audit
    assert json.loads(result.content)["error"] == f"거부됨: {korean}"
    assert shown == korean  # the person: the same words, without the frame


def test_refused_keeps_the_reason_it_was_given():
    reason = Reason(gettext_noop("sql is empty"))
    assert Refused(reason).reason is reason and str(Refused(reason)) == "sql is empty"


def test_re_identifications_fixed_reasons_are_translated_messages():
    """Re-identification states its reasons as fixed text (the SQL tool
    quotes them as a Phrase): each is a message id with a Korean translation."""
    import ast
    from pathlib import Path

    from governance.pii import reidentify

    tree = ast.parse(Path(reidentify.__file__).read_text(encoding="utf-8"))
    stated = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ReidentifyError" and node.args
    ]
    assert len(stated) >= 4 and all(isinstance(text, str) for text in stated)
    with translation.override("ko"):
        for text in stated:
            assert HANGUL.search(Phrase(text).render()), text

"""Logs with the request and run ids (owlai.logs): JSON lines on request,
the request id taken from a proxy's X-Request-ID when it looks like one and
named in the response, the run id on every line a turn's run writes."""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.test import Client

from chat.services import conversation_create
from owlai.logs import ContextFilter, json_formatter
from tests.support.fake_llm import text, tool_call
from tests.support.stack import free_port
from tests.test_turn import fake, scripted_models, start_and_run  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def json_lines():
    """What the console handler writes with OWLAI_LOG_FORMAT=json, read back."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(json_formatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)


def test_a_request_s_lines_carry_its_id_and_the_response_names_it(settings, json_lines):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # /readyz logs the failed check
    response = Client().get("/readyz", HTTP_X_REQUEST_ID="lb-7f3a.42")
    assert response.status_code == 503 and response["X-Request-ID"] == "lb-7f3a.42"
    (line,) = [entry for entry in json_lines() if entry["message"].startswith("readiness check failed")]
    assert line["request_id"] == "lb-7f3a.42" and line["run_id"] == ""
    assert {"time", "level", "logger", "process", "thread"} <= set(line)
    assert line["level"] == "WARNING" and line["logger"] == "owlai.health"


def test_an_id_that_does_not_look_like_one_is_replaced():
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="x" * 65)
    assert response.status_code == 200
    given = response["X-Request-ID"]
    assert len(given) == 32 and given != "x" * 65
    assert Client().get("/healthz")["X-Request-ID"] != given  # a new one per request


def test_a_run_s_lines_carry_the_turn_id(personas, scripted_models, fake, json_lines, audit_inserts_refused):  # noqa: F811
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": "SELECT name FROM customers"}), text("x")]
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "고객 이름")
    assert turn.status == "failed"
    (line,) = [entry for entry in json_lines() if entry["message"].startswith("audit write failed")]
    assert line["run_id"] == str(turn.pk) and line["level"] == "ERROR"
    assert "AuditWriteError" in line["exc_info"]
    # Outside the run, no run id.
    logging.getLogger("owlai.test").warning("after the run")
    assert json_lines()[-1]["run_id"] == ""


def test_the_setting_makes_a_process_log_json_lines():
    """OWLAI_LOG_FORMAT=json through settings.LOGGING, as daphne and manage.py load it."""
    import os
    import subprocess
    import sys

    from tests.support.stack import ROOT

    code = "import django, logging; django.setup(); logging.getLogger('owlai.check').warning('json %s', 'line')"
    for fmt, is_json in (("json", True), ("text", False)):
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "owlai.settings", "OWLAI_LOG_FORMAT": fmt},
            capture_output=True,
            text=True,
            timeout=60,
        )
        last = done.stderr.strip().splitlines()[-1]
        if is_json:
            line = json.loads(last)
            assert (line["message"], line["level"], line["logger"]) == ("json line", "WARNING", "owlai.check")
            assert line["request_id"] == "" and line["run_id"] == ""
        else:
            assert last == "json line"

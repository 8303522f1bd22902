"""A spill folder that fills up, with real processes: a Celery worker
(threads pool) whose file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored, as set
before exec) is smaller than the spill file of a big result. The kernel
refuses the write: the call's step ends `failed` with its translated reason,
the audit outcome says `failed` (nobody received the result) with a
value-free reason, no partial file is left, and the turn goes on."""

from __future__ import annotations

import sys
import uuid

import pytest

from audit.models import Outcome, ToolCallAudit
from chat.executor import spill_files, spill_folder
from owlai.ops.models import ProcessHeartbeat
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.fault_helpers import in_turn_language
from tests.support.stack import BIN, Stack, process_env, scripted_provider
from tests.test_e2e_chat import staff_with_grant
from tests.test_reliability import clients_for
from tests.test_reliability_beat import FAST, wait_for

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FILE_LIMIT = 256 * 1024
# About 500 KB of result: far over the spill threshold and the file-size limit.
BIG = "SELECT g, repeat('x', 5000) AS pad FROM generate_series(1, 100) AS s(g)"

# Set in the worker process before it becomes Celery: what a full disk does
# to one file (EFBIG past the limit), inherited across exec.
LIMITED = (
    "import os, resource, signal, sys;"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
    f"resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_LIMIT}, {FILE_LIMIT}));"
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def test_a_worker_whose_spill_file_cannot_be_written_fails_the_step_honestly(
    tmp_path, require_postgres_app_db, require_redis, pg_customer_db, django_user_model, settings
):
    fake = FakeLLMServer().__enter__()
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": BIG}), text("결과가 너무 큽니다.")]
    var = tmp_path / "var"
    config_path = scripted_provider(tmp_path, fake.base_url)
    env = process_env(config_path, OWLAI_TEST_TARGET_DSN=pg_customer_db.dsn, OWLAI_VAR_DIR=str(var), **FAST)
    stack = Stack(tmp_path, env)
    settings.VAR_DIR = var  # where this test looks for the files
    try:
        stack.start_redis()
        stack.start_web()
        stack._start(
            "worker",
            [sys.executable, "-c", LIMITED, str(BIN / "celery"), "-A", "owlai", "worker", "-P", "threads", "-c", "2"]
            + ["-n", f"limited-{uuid.uuid4().hex[:6]}@%h", "-Q", stack.env["OWLAI_CELERY_QUEUE"], "-l", "warning"]
            + ["--without-gossip", "--without-mingle", "--without-heartbeat"],
        )
        wait_for(lambda: ProcessHeartbeat.objects.filter(kind="worker").exists(), 30, "worker heartbeat")

        (client,) = clients_for(stack, staff_with_grant(django_user_model), 1)
        try:
            events = client.ask("주문을 전부 보여 줘", timeout=60)
        finally:
            client.close()
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()
        fake.__exit__(None, None, None)

    assert events[-1]["type"] == "turn.finished" and events[-1]["status"] == "completed", events[-3:]
    (step,) = [e for e in events if e["type"] == "tool.finished"]
    assert step["outcome"] == "failed"
    assert step["reason"] == in_turn_language(
        events[-1]["turn_id"], "the result was too big to show whole and could not be saved for paging; it was withheld"
    )
    (row,) = ToolCallAudit.objects.all()
    assert (row.outcome, row.call_outcome) == (Outcome.STARTED, Outcome.FAILED)
    assert row.final.reason == "spill file not written: EFBIG"
    conversation_id = row.conversation_id
    folder = spill_folder(conversation_id)
    assert not folder.exists() or list(folder.iterdir()) == []  # no partial file
    assert spill_files(conversation_id) == []
    # The model was told, never shown the rows.
    told = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert len(told) == 1 and "xxxxx" not in told[0]["content"]

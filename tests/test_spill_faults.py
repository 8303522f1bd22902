"""A spill folder that cannot take the file (read-only, full): the call's
step closes with a clear error in the turn's language, its audit outcome is
`failed` with a value-free reason (nobody received the result), no partial
file is left or offered to read_spill, and the turn goes on. An outcome
that cannot be recorded removes the spill file it would have offered."""

from __future__ import annotations

import errno
import io
import json
import os
import signal

import pytest
from django.utils import translation

from audit.models import ToolCallAudit
from audit.services import AuditWriteError
from chat.executor import shaping, spill_files, spill_folder
from chat.executor.pipeline import SPILL_FAILED
from chat.services import conversation_create
from tests.support.fake_llm import text, tool_call
from tests.test_turn import events, fake, scripted_models, start_and_run  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

SQL = "SELECT id, name, phone, city FROM customers ORDER BY id"
PHONES = ["010-1234-5678", "010-2222-3333", "010-4444-5555"]


@pytest.fixture
def spilling(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    settings.OWLAI_SPILL_CHARS, settings.OWLAI_SPILL_PREVIEW_ROWS = 120, 1
    return tmp_path


def _refusing_open(code: int):
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if str(path).endswith(".partial"):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    return fake_open


class _FillsUp(io.TextIOWrapper):
    """A file on a disk with room for `room` more bytes: what fits is
    written, then ENOSPC, as the kernel does."""

    room = 40

    def write(self, data: str) -> int:
        if _FillsUp.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken = data[: _FillsUp.room]
        _FillsUp.room -= len(taken)
        super().write(taken)
        super().flush()
        if len(taken) < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return len(data)


def _full_disk(fd, mode="r", encoding=None, **kwargs):
    return _FillsUp(io.FileIO(fd, "w"), encoding=encoding)


def _ask(personas, fake):  # noqa: F811
    fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": SQL}),
        text("결과가 너무 커서 못 보여 드립니다."),
    ]
    conversation = conversation_create(owner=personas.staff)
    return conversation, start_and_run(conversation, personas.staff, "고객 전부 보여 줘")


def _assert_withheld_and_closed(conversation, turn, fake, events, code: str) -> None:  # noqa: F811
    assert turn.status == "completed", turn.error  # the turn goes on: the model was told
    started = [e for e in events if e["type"] == "tool.started"]
    finished = [e for e in events if e["type"] == "tool.finished"]
    assert len(started) == len(finished) == 1  # the step closed
    step = finished[0]
    assert step["outcome"] == "failed"
    assert step["reason"] == SPILL_FAILED.render()
    # The model read the same reason instead of the result, nothing unmasked.
    told = next(m for m in fake.requests[1]["messages"] if m["role"] == "tool")
    assert json.loads(told["content"]) == {"error": SPILL_FAILED.render()}
    assert not any(phone in fake.all_request_text() for phone in PHONES)
    # The audit trail says nobody received the result, and why, without values.
    row = ToolCallAudit.objects.get()
    assert (row.outcome, row.call_outcome) == ("started", "failed")
    assert row.final.reason == f"spill file not written: {code}"
    # No file, whole or partial, is left in the folder or offered to read_spill.
    folder = spill_folder(conversation.pk)
    assert not folder.exists() or list(folder.iterdir()) == []
    assert spill_files(conversation.pk) == []
    offered = [t["function"]["name"] for t in fake.requests[1].get("tools", [])]
    assert "read_spill" not in offered


def test_a_read_only_spill_folder_fails_the_step_and_the_audit_says_failed(
    personas,
    scripted_models,  # noqa: F811
    fake,  # noqa: F811
    events,  # noqa: F811
    spilling,
    monkeypatch,
):
    monkeypatch.setattr(shaping.os, "open", _refusing_open(errno.EROFS))
    conversation, turn = _ask(personas, fake)
    _assert_withheld_and_closed(conversation, turn, fake, events, "EROFS")


def test_a_full_disk_leaves_no_truncated_spill_file(personas, scripted_models, fake, events, spilling, monkeypatch):  # noqa: F811
    _FillsUp.room = 40
    written = []
    real_replace = os.replace
    monkeypatch.setattr(shaping.os, "fdopen", _full_disk)
    monkeypatch.setattr(shaping.os, "replace", lambda *a: written.append(a) or real_replace(*a))
    conversation, turn = _ask(personas, fake)
    assert _FillsUp.room == 0  # part of the file was on disk before the disk was full
    assert written == []  # never renamed to a name read_spill lists
    _assert_withheld_and_closed(conversation, turn, fake, events, "ENOSPC")


def test_the_step_error_is_translated():
    with translation.override("ko"):
        korean = SPILL_FAILED.render()
    assert korean != SPILL_FAILED.for_audit() and "결과" in korean


def test_a_real_file_size_limit_in_a_worker_process_removes_the_partial_file(tmp_path):
    """RLIMIT_FSIZE in a forked process: the kernel refuses the write past the
    limit (EFBIG, SIGXFSZ ignored as a worker would), after part of the file
    was written."""
    import resource

    path = tmp_path / "spill" / "turn1-0123abcd.json"
    record = {"origin": {"tool": "run_sql", "target": "sales"}, "items": "rows", "result": {"rows": ["x" * 100] * 200}}
    pid = os.fork()
    if pid == 0:  # the child: only file system calls, then _exit
        code = 3
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
            try:
                shaping.write_spill(path, record)
                code = 1
            except shaping.SpillUnwritable as exc:
                code = 0 if exc.code == "EFBIG" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert list(path.parent.iterdir()) == []  # neither the file nor its partial

    shaping.write_spill(path, record)  # without the limit: written whole
    assert json.loads(path.read_text()) == record
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_an_outcome_that_cannot_be_recorded_removes_its_spill_file(
    personas,
    scripted_models,  # noqa: F811
    fake,  # noqa: F811
    events,  # noqa: F811
    spilling,
    monkeypatch,
):
    def refused(**kwargs):
        raise AuditWriteError("audit record could not be written: OperationalError")

    monkeypatch.setattr("chat.executor.pipeline.tool_call_outcome_write", refused)
    conversation, turn = _ask(personas, fake)
    assert turn.status == "failed"
    assert len(fake.requests) == 1  # the result never reached the model
    assert spill_files(conversation.pk) == []
    folder = spill_folder(conversation.pk)
    assert list(folder.iterdir()) == []


def test_a_spill_that_works_is_still_offered_to_read_spill(personas, scripted_models, fake, events, spilling):  # noqa: F811
    conversation, turn = _ask(personas, fake)
    assert turn.status == "completed"
    (name,) = spill_files(conversation.pk)
    assert [p.name for p in spill_folder(conversation.pk).iterdir()] == [name]
    offered = [t["function"]["name"] for t in fake.requests[1]["tools"]]
    assert "read_spill" in offered
    assert ToolCallAudit.objects.get().call_outcome == "success"

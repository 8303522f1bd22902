"""A small world for executor tests that go through every tool: the
personas' `sales` connection (SQLite), a granted document collection, one
real conversation of staff's, spill files under a temporary VAR_DIR.

    w = tool_world(personas, settings, tmp_path)
    w.call("run_sql", {"connection": "sales", "sql": "SELECT 1"})  # (payload, outcome)
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

_turns = itertools.count(1000)


@dataclass
class ToolWorld:
    personas: object
    collection: object
    conversation: object
    settings: object
    tier: str = "private"

    def context(self, *, user=None, conversation=None):
        from chat.context import TurnContext

        user = user or self.personas.staff
        return TurnContext(
            user_id=user.pk,
            username=user.username,
            tier=self.tier,
            model_name="m",
            provider_name="p",
            conversation_id=(conversation or self.conversation).pk,
            # A new turn per call: inside the test's transaction the commit
            # hooks that keep a turn's cached known values current never fire.
            turn_id=next(_turns),
        )

    def call(self, name: str, arguments: dict | str, *, approvals=None, trace=None, **context) -> tuple[dict, str]:
        """One call in its own run's tool session (`approvals`: its gate;
        `trace`: a list the stages entered are appended to)."""
        from chat.executor import ToolSession, execute_tool_call

        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        with ToolSession(ctx=self.context(**context), approvals=approvals, trace=trace) as session:
            result = execute_tool_call(session, name=name, arguments=raw)
        return json.loads(result.content), result.outcome

    def spill(self, sql: str = "SELECT id, name, phone, city FROM customers ORDER BY id", **context) -> dict:
        """Run `sql` with a spill threshold so small that its result spills;
        the preview the model got."""
        saved = self.settings.OWLAI_SPILL_CHARS, self.settings.OWLAI_SPILL_PREVIEW_ROWS
        self.settings.OWLAI_SPILL_CHARS, self.settings.OWLAI_SPILL_PREVIEW_ROWS = 120, 1
        try:
            payload, outcome = self.call("run_sql", {"connection": "sales", "sql": sql}, **context)
        finally:
            self.settings.OWLAI_SPILL_CHARS, self.settings.OWLAI_SPILL_PREVIEW_ROWS = saved
        assert outcome == "success" and "spilled" in payload, payload
        return payload


def tool_world(personas, settings, tmp_path) -> ToolWorld:
    from chat.services import conversation_create
    from governance.models import Document, DocumentCollection

    settings.VAR_DIR = tmp_path / "var"
    collection = DocumentCollection.objects.create(name="manuals", exposure="all_models")
    Document.objects.create(
        collection=collection,
        title="환불 안내",
        body="환불 문의는 010-9876-5432 로. 양식: https://files.example.com/form.pdf?token=s3cr3t-t0ken",
    )
    personas.role.document_collections.add(collection)
    return ToolWorld(personas, collection, conversation_create(owner=personas.staff), settings)

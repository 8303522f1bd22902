"""A governed connection over a disposable customer database, for tests that
go through the real executor: a user with a whole-database grant, the
personal-data columns classified as in CUSTOMER_SCHEMA, one conversation.

    g = governed_connection(customer_db, django_user_model)
    payload, outcome = g.run("SELECT name FROM customers")
    g.audit_rows()   # this conversation's tool-call audit rows
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from tests.support.customer_dbs import CUSTOMER_SCHEMA, CustomerDb

_names = itertools.count(1)
_turns = itertools.count(1)


@dataclass
class Governed:
    db: CustomerDb
    connection: object
    user: object
    conversation: object
    tier: str = "private"

    def context(self, turn_id: int | None = None):
        from chat.context import TurnContext

        return TurnContext(
            user_id=self.user.pk,
            username=self.user.username,
            tier=self.tier,
            model_name="m",
            provider_name="p",
            conversation_id=self.conversation.pk,
            # Each call its own turn unless told: the tests run inside one
            # transaction, where commit hooks (which keep a turn's cached
            # known values current) never fire.
            turn_id=turn_id if turn_id is not None else next(_turns),
        )

    def run(self, sql: str, *, tool: str = "run_sql") -> tuple[dict, str]:
        """(the JSON the model would read, outcome)."""
        from chat.executor import execute_tool_call

        arguments = json.dumps({"connection": self.connection.name, "sql": sql})
        result = execute_tool_call(self.context(), name=tool, arguments=arguments)
        return json.loads(result.content), result.outcome

    def tokenise(self, kind: str, value: str) -> str:
        """The token this conversation's vault gives `value` (allocating it)."""
        from chat.vault import DbVault

        return DbVault(self.conversation.pk).token_for(kind, value)

    def audit_rows(self):
        from audit.models import ToolCallAudit

        return list(ToolCallAudit.objects.filter(conversation_id=self.conversation.pk).order_by("id"))

    def new_conversation(self) -> None:
        from chat.services import conversation_create

        self.conversation = conversation_create(owner=self.user)


def classify(connection, schema: dict) -> None:
    """Store `schema` ({table: {column: kind or None}}) as the connection's
    confirmed manual classifications."""
    from governance.models import ColumnClassification

    for table, columns in schema.items():
        for column, kind in columns.items():
            ColumnClassification.objects.create(
                connection=connection,
                table_name=table,
                column_name=column,
                pii_kind=kind or "",
                source="manual",
                state="confirmed",
            )


def governed_connection(db: CustomerDb, user_model, *, schema: dict | None = None) -> Governed:
    from chat.services import conversation_create
    from governance.models import DbConnection, DbGrant, Role
    from governance.services import db_connection_set_stored_dsn

    n = next(_names)
    user = user_model.objects.create_user(f"governed{n}", password="pw-governed-123")
    role = Role.objects.create(name=f"governed-role-{n}")
    role.users.add(user)
    connection = DbConnection.objects.create(name=f"customer{n}", engine=db.engine, business_summary="customers")
    db_connection_set_stored_dsn(connection=connection, dsn=db.dsn)
    DbGrant.objects.create(role=role, connection=connection, whole_database=True)
    classify(connection, schema or CUSTOMER_SCHEMA)
    return Governed(db, connection, user, conversation_create(owner=user))


def spell(governed: Governed, template: str, length: int, pick=lambda rows: rows[0][0]) -> str:
    """An attacker's loop: run `template` once per character position k and
    read the number it returns as a code point. A refused call or a masked
    cell (a token, not a number) spells nothing at that position ("?")."""
    out = []
    for k in range(1, length + 1):
        payload, outcome = governed.run(template.format(k=k))
        if outcome == "denied":
            out.append("?")
            continue
        assert outcome == "success", payload
        cell = pick(payload["rows"])
        out.append(chr(int(cell)) if isinstance(cell, int) or str(cell).isdigit() else "?")
    return "".join(out)

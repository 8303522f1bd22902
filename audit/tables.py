"""The audit tables, named once. Pure constants (no Django import), so the
database guards (PostgreSQL roles/RLS, SQLite triggers in a migration), the
retention job and the digest chain can share them; tests/test_vocabulary.py
checks them against the models' own table names."""

from __future__ import annotations

TOOL_CALLS = "audit_toolcallaudit"
# The outcome of a tool call whose attempt row (outcome "started") was written
# before it ran: the tables are append-only, so the outcome is a second record.
TOOL_CALL_OUTCOMES = "audit_toolcalloutcome"
EVENTS = "audit_auditevent"
DIGESTS = "audit_auditdigest"

# The append-only tables: database guards and retention cover all of them.
AUDIT_TABLES: tuple[str, ...] = (TOOL_CALLS, TOOL_CALL_OUTCOMES, EVENTS, DIGESTS)
# The digest chain covers the records, not itself.
DIGESTED_TABLES: tuple[str, ...] = (TOOL_CALLS, TOOL_CALL_OUTCOMES, EVENTS)

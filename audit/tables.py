"""The audit tables, named once. Pure constants (no Django import), so the
database guards (PostgreSQL roles/RLS, SQLite triggers in a migration), the
retention job and the digest chain can share them; tests/test_vocabulary.py
checks them against the models' own table names."""

from __future__ import annotations

TOOL_CALLS = "audit_toolcallaudit"
EVENTS = "audit_auditevent"
DIGESTS = "audit_auditdigest"

# The append-only tables: database guards and retention cover all three.
AUDIT_TABLES: tuple[str, ...] = (TOOL_CALLS, EVENTS, DIGESTS)
# The digest chain covers the records, not itself.
DIGESTED_TABLES: tuple[str, ...] = (TOOL_CALLS, EVENTS)

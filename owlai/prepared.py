"""Server-side prepared statements on Django's own PostgreSQL connection, for
the few statements that run on every tool call.

Why: Django's psycopg cursors bind parameters on the client and never
prepare, so PostgreSQL parses and plans each of them on every call. For the
executor's grant lookup planning took longer than running the query
(bench/executor.py). A server-binding psycopg cursor on the same connection
(same session, same transaction, same adapters) prepares the statement once
per connection and reuses the plan.

Off (plain Django cursor) on SQLite and when OWLAI_PREPARED_STATEMENTS=0, e.g.
behind a connection pooler that cannot keep prepared statements. The settings
module gives psycopg a prepare threshold only when it is on: Django's
default (None) makes psycopg refuse to prepare anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction

from owlai.connection_health import CONNECTION_LOST, renew_if_broken


def current() -> Any:
    """This thread's default database connection (what `django.db.connection`
    stands for). The proxy looks the connection up again at every attribute
    (about 1.5 us each, dozens per tool call and turn): looked up once per
    statement here instead."""
    return connections[DEFAULT_DB_ALIAS]


def enabled(connection: Any = None) -> bool:
    connection = connection if connection is not None else current()
    return connection.vendor == "postgresql" and bool(getattr(settings, "OWLAI_PREPARED_STATEMENTS", False))


def writes_in_with() -> bool:
    """Whether this database runs INSERT and UPDATE inside WITH (PostgreSQL;
    SQLite does not), so that a write and what goes with it are one
    statement: atomic without a transaction, one round trip."""
    return current().vendor == "postgresql"


def fetchall(sql: str, params: Sequence[Any]) -> list[tuple]:
    """Run `sql` (%s placeholders) and return its rows. A read (SELECT)
    that finds its connection lost outside a transaction runs once more on a
    new one: reading twice changes nothing (a write may have committed
    before its answer was lost, so it is never repeated here)."""
    # A connection a query failed on is checked again (and replaced if
    # broken): a turn runs for minutes past the check Django does per task.
    renew_if_broken()
    try:
        return _fetchall(sql, params)
    except CONNECTION_LOST:
        if current().in_atomic_block or sql.lstrip()[:6].upper() != "SELECT":
            raise
    renew_if_broken()
    return _fetchall(sql, params)


def _fetchall(sql: str, params: Sequence[Any]) -> list[tuple]:
    connection = current()
    if not enabled(connection):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    import psycopg

    # What Django's own cursors do first (CONN_HEALTH_CHECKS): a connection
    # kept from before a database restart is checked at the first statement
    # of a request or task and replaced when it no longer answers.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    # Django's error wrapper: psycopg errors become django.db errors, and a
    # broken connection is noticed (errors_occurred) like after any query.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchall()


def insert(row: models.Model) -> None:
    """INSERT one new row (its pk set from RETURNING), for the few models a
    turn writes several times over (its events, its messages). The values
    come from the model's fields (pre_save fills auto_now_add,
    get_db_prep_save adapts JSON, UUIDs and times), so the model stays the one
    definition of the row; the ORM's save path (signals, the generic insert
    compiler) is skipped. Elsewhere than PostgreSQL: a plain save."""
    connection = current()
    if not enabled(connection):
        row.save(force_insert=True)
        return
    ((pk,),) = fetchall(insert_sql(type(row)), insert_values(row, connection))
    inserted(row, pk, connection)


def insert_values(row: models.Model, connection: Any = None) -> list:
    """The parameters of `insert_sql(type(row))` for `row`."""
    connection = connection if connection is not None else current()
    return [f.get_db_prep_save(f.pre_save(row, True), connection) for f in insert_fields(type(row))]


def inserted(row: models.Model, pk, connection: Any = None) -> None:
    """Mark `row` as stored under `pk` (after an INSERT of this module)."""
    row.pk = pk
    row._state.adding = False
    row._state.db = (connection if connection is not None else current()).alias


@cache
def insert_fields(model: type[models.Model]) -> tuple:
    return tuple(f for f in model._meta.concrete_fields if not f.primary_key)


@cache
def insert_sql(model: type[models.Model]) -> str:
    fields = insert_fields(model)
    return (
        f"INSERT INTO {model._meta.db_table} ({', '.join(f.column for f in fields)})"
        f" VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {model._meta.pk.column}"
    )


def columns(model: type[models.Model], alias: str) -> str:
    """The select list for `instances`: every concrete column of `model`, in order."""
    return ", ".join(f"{alias}.{f.column}" for f in model._meta.concrete_fields)


def instances(model: type[models.Model], row: Sequence[Any], start: int = 0) -> models.Model:
    """The `model` instance in `row[start:]` (selected with `columns`), its
    values converted as the ORM would (JSON decoded, times made aware)."""
    values = row[start : start + len(model._meta.concrete_fields)]
    connection = current()
    converted = []
    for value, (col, converters) in zip(values, _converters(model), strict=True):
        for converter in converters:
            value = converter(value, col, connection)
        converted.append(value)
    return model.from_db(connection.alias, None, converted)


@cache
def _converters(model: type[models.Model]) -> tuple:
    fields = []
    connection = current()
    for field in model._meta.concrete_fields:
        col = field.get_col(model._meta.db_table)
        fields.append((col, tuple(connection.ops.get_db_converters(col) + field.get_db_converters(connection))))
    return tuple(fields)


def update_and_insert(update_sql: str, update_params: Sequence[Any], rows: Sequence[models.Model]) -> bool:
    """Run `update_sql` (an UPDATE of at most one row, `... RETURNING id`)
    and, only if it matched, INSERT `rows` (new model instances; their pks
    stay unset): on PostgreSQL in one statement (data-modifying WITH), so
    atomic without a transaction, and one round trip; elsewhere as separate
    statements in one transaction. Returns whether it matched."""
    if not writes_in_with():
        with transaction.atomic():
            if not fetchall(update_sql, update_params):
                return False
            for row in rows:
                row.save(force_insert=True)
            return True
    params = [*update_params]
    connection = current()
    for row in rows:
        params.extend(insert_values(row, connection))
    return bool(fetchall(_update_and_insert_sql(update_sql, tuple(type(row) for row in rows)), params))


@cache
def _update_and_insert_sql(update_sql: str, shapes: tuple[type[models.Model], ...]) -> str:
    parts = [f"updated AS ({update_sql})"]
    for n, model in enumerate(shapes):
        fields = insert_fields(model)
        parts.append(
            f"row{n} AS (INSERT INTO {model._meta.db_table} ({', '.join(f.column for f in fields)})"
            f" SELECT {', '.join(['%s'] * len(fields))} FROM updated)"
        )
    return f"WITH {', '.join(parts)} SELECT 1 FROM updated"

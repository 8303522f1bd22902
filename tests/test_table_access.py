"""Table grants: whole-database grants cover the company's tables, never the
server's catalogs, statistics or activity views."""

from __future__ import annotations

import pytest

from governance.sql.dialects import configured_schemas, is_system_schema
from governance.sql.table_access import GrantScope, normalise_table, tables_not_granted

WHOLE = [(True, [])]

# Relations a whole-database grant must never cover, per dialect.
SYSTEM_RELATIONS = {
    "postgres": [
        "pg_stats",
        "pg_statistic",
        "pg_stat_activity",
        "pg_stat_statements",
        "pg_class",
        "pg_authid",
        "pg_shadow",
        "pg_hba_file_rules",
        "pg_file_settings",
        "pg_settings",
        "pg_catalog.pg_stats",
        "pg_catalog.pg_stat_activity",
        "information_schema.columns",
        "information_schema.tables",
        "pg_toast.pg_toast_16384",
        "pg_temp.t",
        "pg_temp_3.t",
        "pg_toast_temp_1.t",
        "mydb.public.customers",  # catalog-qualified: not one of the configured schemas
        "public.pg_stat_statements",  # extension views live in a user schema
        "public.pg_buffercache",
    ],
    "mysql": [
        "mysql.user",
        "mysql.innodb_index_stats",
        "mysql.innodb_table_stats",
        "information_schema.column_statistics",
        "information_schema.processlist",
        "information_schema.columns",
        "performance_schema.events_statements_current",
        "performance_schema.events_statements_history_long",
        "sys.statement_analysis",
        "sys.x$processlist",
        "otherdb.customers",  # another database, not listed
    ],
    "sqlite": [
        "sqlite_master",
        "sqlite_schema",
        "sqlite_temp_master",
        "sqlite_sequence",
        "sqlite_stat1",
        "sqlite_stat4",
        "main.sqlite_master",
        "main.sqlite_stat1",
        "temp.scratch",
        "temp.sqlite_temp_master",
        "aux.customers",  # an attached database
        "pragma_table_info",
        "pragma_database_list",
        "dbstat",
    ],
}


@pytest.mark.parametrize(
    ("dialect", "relation"), [(d, r) for d, relations in SYSTEM_RELATIONS.items() for r in relations]
)
def test_whole_database_grant_does_not_cover_system_relations(dialect: str, relation: str) -> None:
    scope = GrantScope.merge(WHOLE, dialect)
    assert tables_not_granted([relation], scope, dialect) == [relation]
    # ... even if an admin lists a system schema as a connection schema
    schema = relation.split(".")[-2] if "." in relation else None
    if schema and is_system_schema(schema, dialect):
        scope = GrantScope.merge(WHOLE, dialect, schemas=[schema])
        assert tables_not_granted([relation], scope, dialect) == [relation]


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_system_relations_are_refused_in_any_spelling(dialect: str) -> None:
    scope = GrantScope.merge(WHOLE, dialect)
    for relation in SYSTEM_RELATIONS[dialect]:
        upper = relation.upper()
        assert tables_not_granted([upper], scope, dialect) == [upper]


@pytest.mark.parametrize(
    ("dialect", "tables"),
    [
        ("postgres", ["customers", "public.customers", "orders", "statistics", "public.stats_pg"]),
        ("mysql", ["customers", "orders", "innodb_table_stats"]),  # bare: the DSN's database
        ("sqlite", ["customers", "main.customers", "orders", "stats"]),
    ],
)
def test_whole_database_grant_covers_user_tables_of_the_default_schema(dialect: str, tables: list[str]) -> None:
    assert tables_not_granted(tables, GrantScope.merge(WHOLE, dialect), dialect) == []


def test_postgres_configured_schemas() -> None:
    scope = GrantScope.merge(WHOLE, "postgres", schemas=["sales", "Public"])
    assert scope.schemas == frozenset({"sales", "public"})
    assert tables_not_granted(["sales.orders", "public.customers", "orders"], scope, "postgres") == []
    assert tables_not_granted(["hr.salaries"], scope, "postgres") == ["hr.salaries"]
    only_sales = GrantScope.merge(WHOLE, "postgres", schemas=["sales"])
    assert tables_not_granted(["public.customers"], only_sales, "postgres") == ["public.customers"]


def test_mysql_qualified_names_need_a_listed_database() -> None:
    blank = GrantScope.merge(WHOLE, "mysql")
    assert tables_not_granted(["shop.customers"], blank, "mysql") == ["shop.customers"]
    listed = GrantScope.merge(WHOLE, "mysql", schemas=["shop"])
    assert tables_not_granted(["shop.customers", "customers"], listed, "mysql") == []


def test_explicit_grant_names_a_system_relation() -> None:
    scope = GrantScope.merge([(False, ["pg_catalog.pg_stats"])], "postgres")
    # pg_catalog is searched first, so the bare name is the same relation
    assert tables_not_granted(["pg_stats", "pg_catalog.pg_stats", "PG_CATALOG.PG_STATS"], scope, "postgres") == []
    assert tables_not_granted(["pg_statistic", "customers"], scope, "postgres") == ["pg_statistic", "customers"]
    bare = GrantScope.merge([(False, ["pg_stats"])], "postgres")
    assert tables_not_granted(["pg_catalog.pg_stats"], bare, "postgres") == []


def test_explicit_grant_alongside_whole_database() -> None:
    scope = GrantScope.merge([(True, []), (False, ["information_schema.columns"])], "postgres")
    assert tables_not_granted(["information_schema.columns", "customers"], scope, "postgres") == []
    assert tables_not_granted(["information_schema.tables"], scope, "postgres") == ["information_schema.tables"]


def test_table_grants_with_one_schema_match_bare_and_qualified_names() -> None:
    scope = GrantScope.merge([(False, ["customers"])], "postgres")
    assert tables_not_granted(["customers", "public.customers", '"Customers"'], scope, "postgres") == []
    assert tables_not_granted(["orders"], scope, "postgres") == ["orders"]


def test_table_grants_with_several_schemas_do_not_guess_the_resolution() -> None:
    # With search_path (sales, public) a bare name may be either table.
    scope = GrantScope.merge([(False, ["public.customers"])], "postgres", schemas=["sales", "public"])
    assert tables_not_granted(["customers"], scope, "postgres") == ["customers"]
    assert tables_not_granted(["public.customers"], scope, "postgres") == []


def test_scope_without_schemas_uses_the_dialect_default() -> None:
    scope = GrantScope(whole_database=True, tables=frozenset())
    assert tables_not_granted(["public.customers", "pg_stats"], scope, "postgres") == ["pg_stats"]


def test_no_grant_is_none() -> None:
    assert GrantScope.merge([], "postgres") is None


@pytest.mark.parametrize(
    ("dialect", "configured", "expected"),
    [
        ("postgres", [], ("public",)),
        ("postgres", None, ("public",)),
        ("postgres", ["", "  "], ("public",)),
        ("postgres", ["Sales", "public", "sales", "pg_catalog", "information_schema"], ("Sales", "public")),
        ("postgres", ["pg_catalog"], ()),
        ("sqlite", [], ("main",)),
        ("mysql", [], ()),
        ("mysql", ["shop", "mysql", "sys"], ("shop",)),
        ("postgres", "public", ("public",)),  # not a list: the default
    ],
)
def test_configured_schemas(dialect: str, configured: object, expected: tuple[str, ...]) -> None:
    assert configured_schemas(dialect, configured) == expected


def test_normalise_table() -> None:
    assert normalise_table("public.Customers", frozenset({"public"}), "postgres") == "customers"
    assert normalise_table("pg_class", frozenset({"public"}), "postgres") == "pg_catalog.pg_class"
    assert normalise_table("main.t", frozenset({"main"}), "sqlite") == "t"
    assert normalise_table("shop.t", frozenset({"shop"}), "mysql") == "shop.t"

"""Analytics queries in the TPC-H style stay allowed, bind, and run on real
PostgreSQL (empty tables: what matters is that the bound text is valid SQL
with the same meaning, and the guard and binder accept it)."""

from __future__ import annotations

import uuid

import pytest

from governance.sql.binding import bind_postgres, unbound_reason
from governance.sql.execute import execute_readonly
from governance.sql.guard import analyse_sql
from tests.support.customer_dbs import PG_ADMIN_URL, port_open

DDL = [
    "CREATE TABLE region (r_regionkey int, r_name char(25), r_comment varchar(152))",
    "CREATE TABLE nation (n_nationkey int, n_name char(25), n_regionkey int, n_comment varchar(152))",
    "CREATE TABLE supplier (s_suppkey int, s_name char(25), s_address varchar(40), s_nationkey int,"
    " s_phone char(15), s_acctbal numeric(15,2), s_comment varchar(101))",
    "CREATE TABLE customer (c_custkey int, c_name varchar(25), c_address varchar(40), c_nationkey int,"
    " c_phone char(15), c_acctbal numeric(15,2), c_mktsegment char(10), c_comment varchar(117))",
    "CREATE TABLE part (p_partkey int, p_name varchar(55), p_mfgr char(25), p_brand char(10), p_type varchar(25),"
    " p_size int, p_container char(10), p_retailprice numeric(15,2), p_comment varchar(23))",
    "CREATE TABLE partsupp (ps_partkey int, ps_suppkey int, ps_availqty int, ps_supplycost numeric(15,2),"
    " ps_comment varchar(199))",
    "CREATE TABLE orders (o_orderkey int, o_custkey int, o_orderstatus char(1), o_totalprice numeric(15,2),"
    " o_orderdate date, o_orderpriority char(15), o_clerk char(15), o_shippriority int, o_comment varchar(79))",
    "CREATE TABLE lineitem (l_orderkey int, l_partkey int, l_suppkey int, l_linenumber int, l_quantity numeric(15,2),"
    " l_extendedprice numeric(15,2), l_discount numeric(15,2), l_tax numeric(15,2), l_returnflag char(1),"
    " l_linestatus char(1), l_shipdate date, l_commitdate date, l_receiptdate date, l_shipinstruct char(25),"
    " l_shipmode char(10), l_comment varchar(44))",
]

QUERIES = {
    "q1": "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price, "
    "sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, "
    "sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, avg(l_quantity) AS avg_qty, "
    "avg(l_discount) AS avg_disc, count(*) AS count_order FROM lineitem "
    "WHERE l_shipdate <= date '1998-12-01' - interval '90' day "
    "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    "q3": "SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority "
    "FROM customer, orders, lineitem WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey "
    "AND l_orderkey = o_orderkey AND o_orderdate < date '1995-03-15' AND l_shipdate > date '1995-03-15' "
    "GROUP BY l_orderkey, o_orderdate, o_shippriority ORDER BY revenue DESC, o_orderdate LIMIT 10",
    "q4": "SELECT o_orderpriority, count(*) AS order_count FROM orders WHERE o_orderdate >= date '1993-07-01' "
    "AND o_orderdate < date '1993-07-01' + interval '3' month AND EXISTS (SELECT * FROM lineitem "
    "WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate) GROUP BY o_orderpriority ORDER BY 1",
    "q6": "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem WHERE l_shipdate >= date '1994-01-01' "
    "AND l_shipdate < date '1994-01-01' + interval '1' year AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 "
    "AND l_quantity < 24",
    "q8": "SELECT o_year, sum(CASE WHEN nation = 'BRAZIL' THEN volume ELSE 0 END) / sum(volume) AS mkt_share "
    "FROM (SELECT extract(year FROM o_orderdate) AS o_year, l_extendedprice * (1 - l_discount) AS volume, "
    "n2.n_name AS nation FROM part, supplier, lineitem, orders, customer, nation n1, nation n2, region "
    "WHERE p_partkey = l_partkey AND s_suppkey = l_suppkey AND l_orderkey = o_orderkey "
    "AND o_custkey = c_custkey AND c_nationkey = n1.n_nationkey AND n1.n_regionkey = r_regionkey "
    "AND r_name = 'AMERICA' AND s_nationkey = n2.n_nationkey "
    "AND o_orderdate BETWEEN date '1995-01-01' AND date '1996-12-31' AND p_type = 'ECONOMY ANODIZED STEEL') "
    "AS all_nations GROUP BY o_year ORDER BY o_year",
    "q9": "SELECT nation, o_year, sum(amount) AS sum_profit FROM (SELECT n_name AS nation, "
    "extract(year FROM o_orderdate) AS o_year, "
    "l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity AS amount "
    "FROM part, supplier, lineitem, partsupp, orders, nation WHERE s_suppkey = l_suppkey "
    "AND ps_suppkey = l_suppkey AND ps_partkey = l_partkey AND p_partkey = l_partkey "
    "AND o_orderkey = l_orderkey AND s_nationkey = n_nationkey AND p_name LIKE '%green%') AS profit "
    "GROUP BY nation, o_year ORDER BY nation, o_year DESC",
    "q12": "SELECT l_shipmode, sum(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = '2-HIGH' "
    "THEN 1 ELSE 0 END) AS high_line_count, sum(CASE WHEN o_orderpriority <> '1-URGENT' "
    "AND o_orderpriority <> '2-HIGH' THEN 1 ELSE 0 END) AS low_line_count FROM orders, lineitem "
    "WHERE o_orderkey = l_orderkey AND l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate "
    "AND l_shipdate < l_commitdate AND l_receiptdate >= date '1994-01-01' "
    "AND l_receiptdate < date '1994-01-01' + interval '1' year GROUP BY l_shipmode ORDER BY l_shipmode",
    "q13": "SELECT c_count, count(*) AS custdist FROM (SELECT c_custkey, count(o_orderkey) FROM customer "
    "LEFT OUTER JOIN orders ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%' "
    "GROUP BY c_custkey) AS c_orders (c_custkey, c_count) GROUP BY c_count ORDER BY custdist DESC, c_count DESC",
    "q14": "SELECT 100.00 * sum(CASE WHEN p_type LIKE 'PROMO%' THEN l_extendedprice * (1 - l_discount) ELSE 0 END) "
    "/ sum(l_extendedprice * (1 - l_discount)) AS promo_revenue FROM lineitem, part "
    "WHERE l_partkey = p_partkey AND l_shipdate >= date '1995-09-01' "
    "AND l_shipdate < date '1995-09-01' + interval '1' month",
    "q15": "WITH revenue0 (supplier_no, total_revenue) AS (SELECT l_suppkey, sum(l_extendedprice * (1 - l_discount)) "
    "FROM lineitem WHERE l_shipdate >= date '1996-01-01' AND l_shipdate < date '1996-01-01' + interval '3' month "
    "GROUP BY l_suppkey) SELECT s_suppkey, s_name, s_address, s_phone, total_revenue FROM supplier, revenue0 "
    "WHERE s_suppkey = supplier_no AND total_revenue = (SELECT max(total_revenue) FROM revenue0) ORDER BY s_suppkey",
    "q16": "SELECT p_brand, p_type, p_size, count(DISTINCT ps_suppkey) AS supplier_cnt FROM partsupp, part "
    "WHERE p_partkey = ps_partkey AND p_brand <> 'Brand#45' AND p_type NOT LIKE 'MEDIUM POLISHED%' "
    "AND p_size IN (49, 14, 23, 45, 19, 3, 36, 9) AND ps_suppkey NOT IN (SELECT s_suppkey FROM supplier "
    "WHERE s_comment LIKE '%Customer%Complaints%') GROUP BY p_brand, p_type, p_size "
    "ORDER BY supplier_cnt DESC, p_brand, p_type, p_size",
    "q19": "SELECT sum(l_extendedprice * (1 - l_discount)) AS revenue FROM lineitem, part WHERE "
    "(p_partkey = l_partkey AND p_brand = 'Brand#12' AND p_container IN ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG') "
    "AND l_quantity >= 1 AND l_quantity <= 1 + 10 AND p_size BETWEEN 1 AND 5 AND l_shipmode IN ('AIR', 'AIR REG') "
    "AND l_shipinstruct = 'DELIVER IN PERSON') OR (p_partkey = l_partkey AND p_brand = 'Brand#23' "
    "AND p_container IN ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK') AND l_quantity >= 10 "
    "AND l_quantity <= 10 + 10 AND p_size BETWEEN 1 AND 10 AND l_shipmode IN ('AIR', 'AIR REG') "
    "AND l_shipinstruct = 'DELIVER IN PERSON')",
    "q20": "SELECT s_name, s_address FROM supplier, nation WHERE s_suppkey IN (SELECT ps_suppkey FROM partsupp "
    "WHERE ps_partkey IN (SELECT p_partkey FROM part WHERE p_name LIKE 'forest%') AND ps_availqty > "
    "(SELECT 0.5 * sum(l_quantity) FROM lineitem WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey "
    "AND l_shipdate >= date '1994-01-01' AND l_shipdate < date '1994-01-01' + interval '1' year)) "
    "AND s_nationkey = n_nationkey AND n_name = 'CANADA' ORDER BY s_name",
    "q22": "SELECT cntrycode, count(*) AS numcust, sum(c_acctbal) AS totacctbal FROM (SELECT "
    "substring(c_phone FROM 1 FOR 2) AS cntrycode, c_acctbal FROM customer WHERE substring(c_phone FROM 1 FOR 2) "
    "IN ('13', '31', '23', '29', '30', '18', '17') AND c_acctbal > (SELECT avg(c_acctbal) FROM customer "
    "WHERE c_acctbal > 0.00 AND substring(c_phone FROM 1 FOR 2) IN ('13', '31', '23', '29', '30', '18', '17')) "
    "AND NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)) AS custsale "
    "GROUP BY cntrycode ORDER BY cntrycode",
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_tpch_query_is_allowed_and_binds(name: str) -> None:
    sql = QUERIES[name]
    verdict = analyse_sql(sql, "postgres")
    assert verdict.allowed, verdict.reason
    bound = bind_postgres(sql)
    assert unbound_reason(bound.sql) is None
    again = analyse_sql(bound.sql, "postgres")
    assert again.allowed and again.tables == verdict.tables, again.reason


@pytest.fixture(scope="module")
def tpch_db():
    if not port_open("127.0.0.1", 5432):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    name = f"owlai_tpch_{uuid.uuid4().hex[:10]}"
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = f"{base}/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in DDL:
            conn.execute(statement)
        conn.execute("INSERT INTO region VALUES (1, 'AMERICA', 'x')")
        conn.execute("INSERT INTO nation VALUES (1, 'BRAZIL', 1, 'x'), (2, 'CANADA', 1, 'y')")
        conn.execute(
            "INSERT INTO customer VALUES (1, 'c1', 'a', 1, '13-555', 100.00, 'BUILDING', 'x'),"
            " (2, 'c2', 'b', 2, '31-555', 5000.00, 'MACHINERY', 'y'), (3, 'c3', 'c', 2, '17-555', 9000.00, 'AUTO', 'z')"
        )
        conn.execute(
            "INSERT INTO orders VALUES (1, 1, 'O', 10.0, '1995-03-01', '1-URGENT', 'k', 0, 'special requests'),"
            " (2, 2, 'F', 20.0, '1994-02-01', '5-LOW', 'k', 0, 'plain')"
        )
        conn.execute(
            "INSERT INTO lineitem VALUES (1, 1, 1, 1, 5, 100.0, 0.05, 0.01, 'N', 'O', '1995-03-20', '1995-03-10',"
            " '1995-03-25', 'DELIVER IN PERSON', 'MAIL', 'x'), (2, 1, 1, 1, 30, 200.0, 0.07, 0.02, 'R', 'F',"
            " '1994-02-10', '1994-02-20', '1994-02-25', 'NONE', 'SHIP', 'y')"
        )
    yield dsn
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.services
def test_tpch_queries_run_bound_with_the_results_of_the_text_as_written(tpch_db) -> None:
    import psycopg

    failures = []
    with psycopg.connect(tpch_db) as conn:
        for name, sql in sorted(QUERIES.items()):
            # the bound text runs (the statement's account here is the owner:
            # execute_readonly's account check is not what this test is about)
            try:
                bound = execute_readonly(engine="postgresql", dsn=tpch_db, sql=sql, row_cap=50, timeout_ms=5000)
            except Exception as exc:  # noqa: BLE001 - reported below
                failures.append((name, str(exc)[:160]))
                continue
            assert bound.rows == [tuple(row) for row in conn.execute(sql).fetchall()], name
            conn.rollback()
    assert failures == []

"""Tamper evidence for the append-only audit tables: a keyed, chained digest.

`seal_new_rows()` (run periodically) appends an `AuditDigest` row for each new
range of audit rows; `verify()` recomputes every digest inside the retained
period and reports changed, missing or unexpected rows and broken chains.

Key
    HMAC-SHA256 with `settings.OWLAI_AUDIT_HMAC_KEY`. The key lives outside the
    database, so whoever can rewrite audit rows (a database superuser, a stolen
    backup) cannot re-sign them. When the setting is empty a key is derived
    from SECRET_KEY with its own label (HMAC(SECRET_KEY, label)), so the demo
    works out of the box; production should set a dedicated key: the audit
    chain then does not depend on SECRET_KEY rotation, and SECRET_KEY leaking
    through another channel does not let anyone re-sign the trail. Changing
    either key (the configured one, or SECRET_KEY while no key is configured)
    makes every existing digest fail verification.

Row canonical form (`canonical_row`)
    A compact JSON object of every concrete field keyed by `attname`, keys
    sorted, values normalised so the bytes do not depend on the backend:
    datetimes as UTC ISO-8601 with microseconds, UUIDs as lowercase hyphenated
    str, JSON fields as their decoded value (serialised with sort_keys, no
    ASCII escaping, compact separators), None as null. The row id is one of the
    fields, so a row cannot be renumbered. Adding a column to a digested table
    changes the canonical form of every old row: such a migration must come
    with a documented re-baseline of the chain.

Digest of one range
    HMAC(key, header || sha256(canonical(row)) for each row in id order) with
    header = "owlai-audit-digest-v1\\n" previous "\\n" table "\\n" first_id
    "\\n" last_id "\\n" row_count "\\n"; previous is the hex digest of the
    table's previous range ("" for the first). Row hashes are fixed-length
    (32 bytes), so the framing is unambiguous.

Limits
    Deleting the *newest* digest(s) of a table together with rows of their
    ranges cannot be told apart from "not sealed yet" by the database alone;
    `audit_verify` prints each table's head digest so a copy kept elsewhere
    (the cron log, a ticket, a WORM store) anchors the tail.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import hashlib
import hmac
import ipaddress
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Count, Max, Min
from django.utils import timezone

from audit.models import DIGESTED_TABLES, AuditDigest

# Rows younger than this are left for the next run. An id is allocated at
# INSERT time but the row only becomes visible at COMMIT: a transaction that
# took id 10 and commits after another one committed id 11 would leave a hole
# that sealing 11 would close for good, and row 10 would then show up later
# as an "unexpected_row" inside a sealed range. `created_at` is set just before
# the INSERT, so once every visible row below the cut is older than this delay,
# any still-invisible row with a smaller id belongs to a transaction that has
# been open longer than the delay; audit rows are written in short (mostly
# autocommit) transactions, so a few seconds suffice. Sealing also stops at
# the first row younger than the delay (it does not skip over it), because ids
# and `created_at` are not strictly in the same order across processes.
SETTLE_DELAY = dt.timedelta(seconds=5)

# At most this many rows per digest, so one seal transaction stays short and a
# reported range stays small enough to investigate.
MAX_ROWS_PER_DIGEST = 10_000

# Rows of one range are not strictly ordered by `created_at` (clock skew
# between processes, transactions open for a while). A range whose oldest
# possible row is closer than this to the retention cut is treated as
# straddling it.
BOUNDARY_MARGIN = dt.timedelta(hours=1)

STREAM_CHUNK = 2000

_KEY_LABEL = b"owlai.audit.digest-hmac-key.v1"
_HEADER_TAG = "owlai-audit-digest-v1"

KIND_CHANGED = "changed"
KIND_MISSING = "missing"
KIND_CHAIN_BROKEN = "chain_broken"
KIND_UNEXPECTED_ROW = "unexpected_row"


# --- Key ----------------------------------------------------------------------


def hmac_key_is_derived() -> bool:
    return not settings.OWLAI_AUDIT_HMAC_KEY


def hmac_key() -> bytes:
    """The digest key: the configured one, else one derived from SECRET_KEY."""
    configured = settings.OWLAI_AUDIT_HMAC_KEY
    if configured:
        return configured.encode()
    # A distinct label, so this key is unrelated to every other use of
    # SECRET_KEY (sessions, signing, the field-encryption fallback).
    return hmac.new(settings.SECRET_KEY.encode(), _KEY_LABEL, hashlib.sha256).digest()


# --- Canonical form -----------------------------------------------------------


def _datetime(value: Any) -> Any:
    if value is None:
        return None
    if timezone.is_naive(value):
        # USE_TZ = True in this project; a naive value could only come from a
        # USE_TZ = False deployment, whose stored values are taken as UTC.
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat(timespec="microseconds")


def _uuid(value: Any) -> Any:
    return None if value is None else str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))


def _json(value: Any) -> Any:
    # The decoded JSON value; serialised by `canonical_row` with sort_keys, so
    # key order (jsonb reorders keys, SQLite keeps them) does not matter.
    return value


_NATIVE = frozenset({type(None), bool, int, float, str})


def _plain(value: Any) -> Any:
    if type(value) in _NATIVE or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime):
        return _datetime(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, ipaddress.IPv4Interface | ipaddress.IPv6Interface):
        return str(value.ip)
    return str(value)


# json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")),
# with the encoder built once.
_encode = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode


def _normaliser(model_field: models.Field) -> Callable[[Any], Any]:
    if isinstance(model_field, models.DateTimeField):
        return _datetime
    if isinstance(model_field, models.UUIDField):
        return _uuid
    if isinstance(model_field, models.JSONField):
        return _json
    return _plain


def row_fields(model: type[models.Model]) -> list[models.Field]:
    """Every concrete field, in a fixed order (sorted by attname)."""
    return sorted(model._meta.concrete_fields, key=lambda f: f.attname)


def row_attnames(model: type[models.Model]) -> list[str]:
    return [f.attname for f in row_fields(model)]


class _Canon:
    """Canonical serialisation of one model's rows (values in `row_attnames` order)."""

    def __init__(self, model: type[models.Model]):
        fields = row_fields(model)
        self.attnames = [f.attname for f in fields]
        self.normalisers = [_normaliser(f) for f in fields]
        self.id_index = self.attnames.index(model._meta.pk.attname)
        self.created_index = self.attnames.index("created_at")

    def bytes(self, values: Sequence[Any]) -> bytes:
        record = {name: norm(value) for name, norm, value in zip(self.attnames, self.normalisers, values, strict=True)}
        return _encode(record).encode()

    def hash(self, values: Sequence[Any]) -> bytes:
        return hashlib.sha256(self.bytes(values)).digest()


def canonical_row(model: type[models.Model], values: Sequence[Any]) -> bytes:
    """Canonical bytes of one row, `values` in `row_attnames(model)` order."""
    return _Canon(model).bytes(values)


def canonical_instance(obj: models.Model) -> bytes:
    return canonical_row(type(obj), [getattr(obj, name) for name in row_attnames(type(obj))])


def range_digest(
    key: bytes, *, previous: str, table: str, first_id: int, last_id: int, row_hashes: Iterable[bytes]
) -> tuple[str, int]:
    """(hex digest, row count) of a range; the count is part of the header, so
    the hashes are buffered (32 bytes a row)."""
    hashes = list(row_hashes)
    mac = _range_mac(key, previous=previous, table=table, first_id=first_id, last_id=last_id, row_count=len(hashes))
    for row_hash in hashes:
        mac.update(row_hash)
    return mac.hexdigest(), len(hashes)


def _range_mac(key: bytes, *, previous: str, table: str, first_id: int, last_id: int, row_count: int) -> hmac.HMAC:
    header = f"{_HEADER_TAG}\n{previous}\n{table}\n{first_id}\n{last_id}\n{row_count}\n"
    return hmac.new(key, header.encode(), hashlib.sha256)


def digested_models() -> dict[str, type[models.Model]]:
    """Table name -> model for every table in DIGESTED_TABLES."""
    by_table = {m._meta.db_table: m for m in apps.get_app_config("audit").get_models()}
    result = {}
    for table in DIGESTED_TABLES:
        model = by_table[table]
        # Settle delay and retention both read `created_at`.
        model._meta.get_field("created_at")
        result[table] = model
    return result


# --- Sealing ------------------------------------------------------------------


def _lock_table_chain(table: str) -> None:
    """Serialise sealers of one table for the rest of the transaction."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # An advisory lock rather than SELECT ... FOR UPDATE on the latest
            # digest: it also covers the very first digest (no row to lock).
            key = int.from_bytes(hashlib.sha256(b"owlai.audit.seal:" + table.encode()).digest()[:8], "big", signed=True)
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
        elif connection.vendor == "sqlite":
            # SQLite has one writer at a time; taking the write lock with the
            # transaction's first statement (a write that touches no row, so no
            # trigger fires) makes a second sealer wait for the first to commit
            # and then read its digest, instead of both reading the same
            # "latest" digest and one failing with "database is locked".
            cursor.execute(f'UPDATE "{AuditDigest._meta.db_table}" SET "id" = "id" WHERE 0 = 1')


def _seal_one(*, table: str, model: type[models.Model], canon: _Canon, key: bytes, cutoff: dt.datetime):
    with transaction.atomic():
        _lock_table_chain(table)
        last = AuditDigest.objects.filter(table=table).order_by("-last_id", "-id").first()
        rows = model._default_manager.all()
        if last is not None:
            rows = rows.filter(pk__gt=last.last_id)
        # Stop at the first unsettled row (see SETTLE_DELAY), not just skip it.
        barrier = rows.filter(created_at__gte=cutoff).order_by("pk").values_list("pk", flat=True).first()
        if barrier is not None:
            rows = rows.filter(pk__lt=barrier)
        stream = rows.order_by("pk").values_list(*canon.attnames)[:MAX_ROWS_PER_DIGEST]
        hashes: list[bytes] = []
        first_id = last_id = None
        for values in stream.iterator(chunk_size=STREAM_CHUNK):
            if first_id is None:
                first_id = values[canon.id_index]
            last_id = values[canon.id_index]
            hashes.append(canon.hash(values))
        if not hashes:
            return None
        previous = last.digest if last is not None else ""
        digest, count = range_digest(
            key, previous=previous, table=table, first_id=first_id, last_id=last_id, row_hashes=hashes
        )
        return AuditDigest.objects.create(
            table=table, first_id=first_id, last_id=last_id, row_count=count, previous=previous, digest=digest
        )


def seal_new_rows(*, now: dt.datetime | None = None) -> list[AuditDigest]:
    """Append digests covering every settled, not yet sealed audit row.

    Idempotent: rows are taken after the latest digest's last_id, read under a
    per-table lock, so concurrent or repeated runs never seal a row twice. Ids
    may have gaps (rolled-back inserts): a digest covers exactly the rows
    present when it was made and records their count.
    """
    cutoff = (now or timezone.now()) - SETTLE_DELAY
    key = hmac_key()
    created: list[AuditDigest] = []
    for table, model in digested_models().items():
        canon = _Canon(model)
        while (digest := _seal_one(table=table, model=model, canon=canon, key=key, cutoff=cutoff)) is not None:
            created.append(digest)
    return created


# --- Verification -------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    table: str
    first_id: int
    last_id: int
    kind: str  # "changed" | "missing" | "chain_broken" | "unexpected_row"
    detail: str

    def __str__(self) -> str:
        return f"{self.table} {self.first_id}-{self.last_id} {self.kind}: {self.detail}"


@dataclass(frozen=True)
class Skipped:
    """A range not verified because retention may have deleted some of its rows."""

    table: str
    first_id: int
    last_id: int
    reason: str


@dataclass
class VerifyReport:
    problems: list[Problem] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    ranges_checked: int = 0
    rows_checked: int = 0
    # table -> (last sealed id, head digest hex), for anchoring the tail elsewhere
    heads: dict[str, tuple[int, str]] = field(default_factory=dict)
    # table -> number of rows after the last sealed range
    unsealed: dict[str, int] = field(default_factory=dict)

    @property
    def expired_skipped(self) -> int:
        return sum(1 for s in self.skipped if s.reason == "past retention")


class _Acc:
    """Running state of one digest range while rows stream past."""

    def __init__(self, key: bytes, d: AuditDigest, chain_previous: str | None):
        self.count = 0
        self.first_row: tuple[int, dt.datetime] | None = None
        self.last_row: tuple[int, dt.datetime] | None = None
        self.hashes: list[bytes] = []
        self.key = key
        self.d = d
        self.chain_previous = chain_previous

    def add(self, row_id: int, created_at: dt.datetime, row_hash: bytes) -> None:
        if self.first_row is None:
            self.first_row = (row_id, created_at)
        self.last_row = (row_id, created_at)
        self.count += 1
        self.hashes.append(row_hash)

    def digest(self, previous: str) -> str:
        d = self.d
        mac = _range_mac(
            self.key, previous=previous, table=d.table, first_id=d.first_id, last_id=d.last_id, row_count=self.count
        )
        for row_hash in self.hashes:
            mac.update(row_hash)
        return mac.hexdigest()


def verify(*, now: dt.datetime | None = None) -> list[Problem]:
    """Problems found in the retained part of the audit trail (empty: intact)."""
    return verify_report(now=now).problems


def verify_report(*, now: dt.datetime | None = None) -> VerifyReport:
    """Recompute every digest of the retained period and check the chains.

    Retention: ranges whose digest is older than the retention cut
    (OWLAI_RETENTION_DAYS before `now`) hold only expired rows and are skipped
    (retention legitimately deletes them). A range that straddles the cut is
    verified only if all its rows still exist; with rows missing it is
    reported in `skipped`, not as a problem. A range straddles unless a lower
    bound on the age of its rows is clearly (BOUNDARY_MARGIN) inside the
    retained period (see `_straddles`); the oldest range of a chain whose first
    row is gone has no such bound, so deleting rows there shows up as skipped,
    not as missing. Retention may also delete the oldest digests: the oldest
    remaining digest may then chain to a digest that no longer exists, which is
    accepted only while no retained row lies below its range.
    """
    now = now or timezone.now()
    cutoff = now - dt.timedelta(days=settings.OWLAI_RETENTION_DAYS)
    key = hmac_key()
    report = VerifyReport()
    snapshot = connection.vendor == "postgresql" and not connection.in_atomic_block
    if snapshot:
        # Health check (if due) before the transaction, so SET TRANSACTION is
        # its first statement.
        with connection.cursor():
            pass
    # PostgreSQL: one snapshot for digests and rows, so a seal or retention run
    # committing meanwhile cannot raise a false alarm. SQLite: no transaction;
    # a long read transaction would hold the shared lock and make audit writes
    # time out ("database is locked"), which fails the audited action closed.
    with transaction.atomic() if snapshot else contextlib.nullcontext():
        if snapshot:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for table, model in digested_models().items():
            _verify_table(table=table, model=model, key=key, cutoff=cutoff, report=report)
    return report


def _rows_by_id(queryset, canon: _Canon) -> Iterator[tuple]:
    """Rows as value tuples in id order, read in pages of STREAM_CHUNK by id
    (keyset), so no cursor stays open across the whole pass: on SQLite each
    page is its own short read and writers get in between."""
    after = None
    while True:
        page_qs = queryset if after is None else queryset.filter(pk__gt=after)
        page = list(page_qs.order_by("pk").values_list(*canon.attnames)[:STREAM_CHUNK])
        yield from page
        if len(page) < STREAM_CHUNK:
            return
        after = page[-1][canon.id_index]


def _verify_table(*, table: str, model, key: bytes, cutoff: dt.datetime, report: VerifyReport) -> None:
    canon = _Canon(model)
    manager = model._default_manager
    digests = list(AuditDigest.objects.filter(table=table).order_by("last_id", "id"))
    last_sealed = digests[-1].last_id if digests else None
    unsealed = manager.all() if last_sealed is None else manager.filter(pk__gt=last_sealed)
    report.unsealed[table] = unsealed.count()
    if not digests:
        return
    report.heads[table] = (digests[-1].last_id, digests[-1].digest)
    problems = report.problems

    def problem(lo: int, hi: int, kind: str, detail: str) -> None:
        problems.append(Problem(table, lo, hi, kind, detail))

    # Rows below the oldest digest: none may exist in the retained period. If
    # the oldest digest chains to a predecessor that is gone, retention removed
    # it (accepted) unless retained rows it must have covered are still there.
    below = manager.filter(pk__lt=digests[0].first_id, created_at__gte=cutoff).aggregate(
        n=Count("pk"), lo=Min("pk"), hi=Max("pk")
    )
    if below["n"] and digests[0].previous:
        problem(
            below["lo"],
            below["hi"],
            KIND_CHAIN_BROKEN,
            f"{below['n']} retained row(s) lie below the oldest digest, whose predecessor is gone "
            "(a digest was deleted)",
        )
    elif below["n"]:
        problem(
            below["lo"], below["hi"], KIND_UNEXPECTED_ROW, f"{below['n']} row(s) appeared below the first sealed range"
        )

    # Ranges sealed before the retention cut only hold expired rows.
    start = 0
    while start < len(digests) and digests[start].created_at < cutoff:
        d = digests[start]
        report.skipped.append(Skipped(table, d.first_id, d.last_id, "past retention"))
        start += 1

    altered_digest: set[int] = set()  # index whose `digest` value was edited (rows intact)
    altered_previous: set[int] = set()  # index whose `previous` value was edited (rows intact)
    gap_rows: dict[int, list[int]] = {}  # index -> [count, min id, max id] of rows just before its range
    last_rows: dict[int, tuple[int, dt.datetime]] = {}  # index -> (id, created_at) of its last present row

    def finish(i: int, acc: _Acc) -> None:
        d = digests[i]
        report.ranges_checked += 1
        report.rows_checked += acc.count
        if acc.last_row is not None:
            last_rows[i] = acc.last_row
        computed = acc.digest(d.previous)
        if hmac.compare_digest(computed, d.digest):
            return
        if acc.chain_previous is not None and hmac.compare_digest(acc.digest(acc.chain_previous), d.digest):
            altered_previous.add(i)
            problem(d.first_id, d.last_id, KIND_CHAIN_BROKEN, "the digest's `previous` link was altered (rows match)")
            return
        if i + 1 < len(digests) and hmac.compare_digest(digests[i + 1].previous, computed):
            altered_digest.add(i)
            problem(
                d.first_id,
                d.last_id,
                KIND_CHAIN_BROKEN,
                "the digest value was altered (rows match the next digest's link)",
            )
            return
        counts = f"{acc.count} row(s) present, {d.row_count} sealed"
        if acc.count > d.row_count:
            problem(d.first_id, d.last_id, KIND_UNEXPECTED_ROW, f"{counts}: rows were added to a sealed range")
        elif acc.count == d.row_count:
            problem(
                d.first_id,
                d.last_id,
                KIND_CHANGED,
                f"{counts}; content differs from the sealed digest (a row or the digest record changed)",
            )
        elif _straddles(i, acc, digests, last_rows, manager, cutoff):
            report.skipped.append(Skipped(table, d.first_id, d.last_id, f"straddles the retention cut ({counts})"))
        else:
            problem(d.first_id, d.last_id, KIND_MISSING, f"{counts}: rows were deleted from a sealed range")

    def open_acc(i: int) -> _Acc:
        chain_previous = None
        if i > 0 and digests[i].previous != digests[i - 1].digest:
            chain_previous = digests[i - 1].digest
        return _Acc(key, digests[i], chain_previous)

    if start < len(digests):
        # One ordered pass over the rows of all retained ranges (and the gaps
        # between them), merged with the digest list.
        lower = digests[start - 1].last_id if start > 0 else digests[start].first_id - 1
        stream = _rows_by_id(manager.filter(pk__gt=lower, pk__lte=digests[-1].last_id), canon)
        i = start
        acc = open_acc(i)
        for values in stream:
            row_id = values[canon.id_index]
            while row_id > digests[i].last_id:
                finish(i, acc)
                i += 1
                acc = open_acc(i)
            if row_id < digests[i].first_id:
                gap = gap_rows.setdefault(i, [0, row_id, row_id])
                gap[0] += 1
                gap[2] = row_id
                continue
            acc.add(row_id, values[canon.created_index], canon.hash(values))
        finish(i, acc)
        for j in range(i + 1, len(digests)):
            finish(j, open_acc(j))

    # The chain: each digest links to the one before it (checked for expired
    # digests too: retention deletes digests, it never edits them).
    broken_links: set[int] = set()
    for i in range(1, len(digests)):
        d, prev = digests[i], digests[i - 1]
        if d.first_id <= prev.last_id:
            broken_links.add(i)
            problem(
                d.first_id,
                d.last_id,
                KIND_CHAIN_BROKEN,
                f"range overlaps the previous digest's range (which ends at id {prev.last_id})",
            )
        elif d.previous != prev.digest and (i - 1) not in altered_digest and i not in altered_previous:
            broken_links.add(i)
            if d.first_id - prev.last_id > 1:
                lo, hi = prev.last_id + 1, d.first_id - 1
            else:
                lo, hi = d.first_id, d.last_id
            problem(
                lo,
                hi,
                KIND_CHAIN_BROKEN,
                f"the range starting at id {d.first_id} does not link to the digest before it "
                f"(which ends at id {prev.last_id}): a digest was deleted or altered",
            )

    for i, (n, lo, hi) in sorted(gap_rows.items()):
        if i in broken_links:
            continue  # rows of a deleted digest: already reported as chain_broken
        problem(lo, hi, KIND_UNEXPECTED_ROW, f"{n} row(s) appeared between sealed ranges")


def _straddles(
    i: int,
    acc: _Acc,
    digests: list[AuditDigest],
    last_rows: dict[int, tuple[int, dt.datetime]],
    manager: models.Manager,
    cutoff: dt.datetime,
) -> bool:
    """Could retention have deleted rows of range i? True unless a lower bound
    on the creation time of its rows is clearly inside the retained period.

    Bounds (any that is known; the latest wins): the row at first_id; the last
    row of the previous range (ids grow with time); the previous digest's own
    time, unless that digest was cut by the chunk limit (a backlog sealed in
    one run gives many digests the same time, whatever the age of their rows).
    """
    d = digests[i]
    bounds = []
    if acc.first_row is not None and acc.first_row[0] == d.first_id:
        bounds.append(acc.first_row[1])
    if i > 0:
        prev = digests[i - 1]
        prev_last = last_rows.get(i - 1)
        if prev_last is not None and prev_last[0] == prev.last_id:
            bounds.append(prev_last[1])
        elif i - 1 not in last_rows:  # not streamed (an expired range): look it up
            found = manager.filter(pk=prev.last_id).values_list("created_at", flat=True).first()
            if found is not None:
                bounds.append(found)
        if prev.row_count < MAX_ROWS_PER_DIGEST:
            bounds.append(prev.created_at)
    if not bounds:
        return True
    return max(bounds) < cutoff + BOUNDARY_MARGIN

"""`manage.py audit_verify [--seal]`: check the audit trail against its digests.

Prints one line per problem (table, id range, kind, detail), then a summary
and each table's head digest (keep a copy elsewhere: it anchors the newest
end of the chain). Exit status 1 when any problem is found, 0 otherwise.
With --seal, rows not yet covered by a digest are sealed first.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.digest import hmac_key_is_derived, seal_new_rows, verify_report


class Command(BaseCommand):
    help = "Verify the audit tables against their chained HMAC digests; exit status 1 on any problem."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seal", action="store_true", help="seal new rows before verifying")

    def handle(self, *args, seal: bool, **options) -> None:
        if hmac_key_is_derived():
            self.stderr.write(
                "warning: OWLAI_AUDIT_HMAC_KEY is not set; using a key derived from SECRET_KEY "
                "(production should set its own key, kept outside the database)"
            )
        if seal:
            sealed = seal_new_rows()
            self.stdout.write(f"sealed {len(sealed)} new range(s)")
        report = verify_report()
        for problem in report.problems:
            self.stdout.write(f"{problem.table} {problem.first_id}-{problem.last_id} {problem.kind}: {problem.detail}")
        for skipped in report.skipped:
            if skipped.reason != "past retention":
                self.stdout.write(f"skipped {skipped.table} {skipped.first_id}-{skipped.last_id}: {skipped.reason}")
        straddling = len(report.skipped) - report.expired_skipped
        self.stdout.write(
            f"{len(report.problems)} problem(s); {report.ranges_checked} range(s) with {report.rows_checked} row(s) "
            f"checked; {report.expired_skipped} range(s) past retention skipped; {straddling} range(s) straddling "
            f"the retention cut with rows gone skipped; "
            f"{sum(report.unsealed.values())} row(s) not sealed yet"
        )
        for table, (last_id, digest) in sorted(report.heads.items()):
            self.stdout.write(f"head {table} {last_id} {digest}")
        if report.problems:
            raise CommandError(f"{len(report.problems)} audit integrity problem(s) found", returncode=1)

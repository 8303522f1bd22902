"""`manage.py seed_demo`: a ready-to-try install (demo DB, users, roles, grants).

Idempotent and safe on every `make run`: the demo company file is built only
when missing (``--rebuild`` forces it) and database rows are created only when
missing, so whatever an admin changed afterwards (passwords, role members,
grant scopes, feature defaults) is left alone. The one thing kept in step is
the stored DSN of the ``demo_company`` connection, which must point at the file
this install builds.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.dispatch import Signal
from django.utils.translation import gettext as _

from accounts.builtin_groups import auditor_group_ensure
from audit.events import audit_event_write
from audit.models import EventKind
from governance.demo_company import build_demo_company_db
from governance.field_crypto import SecretUnavailable
from governance.models import (
    ColumnClassification,
    DbConnection,
    DbEngine,
    DbGrant,
    Document,
    DocumentCollection,
    Feature,
    FeatureDefault,
    LlmModel,
    Role,
)
from governance.schema_analysis import schema_analysis_run
from governance.services import (
    db_connection_dsn,
    db_connection_set_stored_dsn,
    feature_default_set,
    install_config_sync,
)
from owlai.install_config import ProviderKind
from owlai.korean import localized_particles

# Sent at the end of seed_demo with `users` ({username: user}), `connection`
# and `chat_model`: a surface above governance (playbooks) adds its demo
# objects without this command importing it.
demo_seeded = Signal()

DEMO_CONNECTION = "demo_company"
DEMO_FILE_NAME = "demo_company.sqlite3"
DEMO_BUSINESS_SUMMARY = "데모 회사 고객·상담·주문 DB: 고객 정보, 상담 이력(메모 포함), 주문 내역"
SALES_ROLE = "영업팀"
SUPPORT_ROLE = "고객센터"
# Members may reveal the original behind a token (the `manager` demo user).
REVEAL_ROLE = "개인정보 열람"
SUPPORT_TABLES = ["consultations", "orders"]


def demo_db_path() -> Path:
    return (Path(settings.VAR_DIR) / DEMO_FILE_NAME).resolve()


def sqlite_dsn(path: Path) -> str:
    """SQLAlchemy-style URL of an absolute path: `sqlite:////abs/path` (four slashes).

    `governance.sql.execute._sqlite_path` strips `sqlite:///` and unquotes the rest, so
    the absolute path keeps its own leading slash.
    """
    return "sqlite:///" + quote(path.as_posix(), safe="/")


DEMO_COLLECTION = "company_policies"
DEMO_DOCUMENTS = [
    ("환불 정책", "상품 수령 후 7일 이내에 환불을 요청할 수 있습니다. 단순 변심은 왕복 배송비를 고객이 부담합니다."),
    ("배송 안내", "평일 오후 2시 이전 결제 건은 당일 출고합니다. 도서산간 지역은 2~3일이 더 걸릴 수 있습니다."),
    ("교환 절차", "교환은 상담 채널로 접수한 뒤 회수 기사가 방문합니다. 불량 상품의 교환 배송비는 회사가 부담합니다."),
]


class Command(BaseCommand):
    help = _("Create the demo company database, demo users, roles and grants (only what is missing).")

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--rebuild",
            action="store_true",
            help=_("Rebuild the demo company database file even if it already exists."),
        )

    def handle(self, *args, **options) -> None:
        path = demo_db_path()
        if options["rebuild"] or not path.exists():
            counts = build_demo_company_db(path)
            self.stdout.write(
                _("Built the demo company database at %(path)s (%(counts)s).")
                % {"path": path, "counts": ", ".join(f"{table} {n}" for table, n in counts.items())}
            )
        else:
            self.stdout.write(_("Demo company database already exists at %(path)s.") % {"path": path})

        with transaction.atomic():
            install_config_sync(config=settings.OWLAI_INSTALL)
            admin, admin_created = self._user("admin", password="admin", superuser=True)
            staff, staff_created = self._user("staff", password="staff", superuser=False)
            manager, manager_created = self._user("manager", password="manager", superuser=False)
            auditor_created = self._auditor()
            connection = self._connection(path)
            sales_role = self._role(
                SALES_ROLE, users=[staff, manager, admin], connection=connection, whole_database=True, tables=[]
            )
            sales_role.document_collections.add(self._policies())
            self._role(SUPPORT_ROLE, users=[], connection=connection, whole_database=False, tables=SUPPORT_TABLES)
            self._reveal_role(users=[manager])
            chat_model = self._chat_default()

        analysed = self._analyse(connection)
        for _receiver, result in demo_seeded.send_robust(
            sender=Command,
            users={"admin": admin, "staff": staff, "manager": manager},
            connection=connection,
            chat_model=chat_model,
        ):
            if isinstance(result, Exception):
                self.stderr.write(f"{_receiver.__module__}: {result!r}")
            elif result:
                self.stdout.write(str(result))
        self._summary(
            admin_created=admin_created,
            staff_created=staff_created,
            manager_created=manager_created,
            auditor_created=auditor_created,
            chat_model=chat_model,
            analysed=analysed,
        )

    @staticmethod
    def _analyse(connection: DbConnection) -> int | None:
        """Classify the demo DB's columns once, so personal data (names
        included, which no format detector finds) is masked from the first
        query; an admin's later classifications are never overwritten."""
        if ColumnClassification.objects.filter(connection=connection).exists():
            return None
        with transaction.atomic():
            audit_event_write(
                kind=EventKind.ANALYSIS_STARTED,
                resource_kind="db_connection",
                resource_id=connection.pk,
                details={"connection": connection.name, "trigger": "seed_demo"},
            )
        return schema_analysis_run(connection_id=connection.pk)

    @staticmethod
    def _reveal_role(*, users: list) -> Role:
        role, created = Role.objects.get_or_create(
            name=REVEAL_ROLE,
            defaults={
                "can_view_raw_pii": True,
                "description": _(
                    "Demo: members may reveal the original behind a masked token (each reveal is audited)."
                ),
            },
        )
        if created:
            role.users.add(*users)
        return role

    @staticmethod
    def _user(username: str, *, password: str, superuser: bool):
        user_model = get_user_model()
        user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
        if user is not None:
            return user, False  # never touch an existing account, least of all its password
        if superuser:
            user = user_model.objects.create_superuser(username, email="", password=password)
        else:
            user = user_model.objects.create_user(username, email="", password=password, is_staff=False)
        return user, True

    def _auditor(self) -> bool:
        """A compliance officer: staff (to sign in to the admin) and a member
        of the built-in auditor group (made again if it is missing), nothing else."""
        group = auditor_group_ensure()
        user, created = self._user("auditor", password="auditor", superuser=False)
        if created:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
            user.groups.add(group)
        return created

    @staticmethod
    def _connection(path: Path) -> DbConnection:
        connection, _created = DbConnection.objects.get_or_create(
            name=DEMO_CONNECTION,
            defaults={"engine": DbEngine.SQLITE, "business_summary": DEMO_BUSINESS_SUMMARY},
        )
        if connection.dsn_env:
            return connection  # an admin chose an environment variable: respect it
        wanted = sqlite_dsn(path)
        try:
            current = db_connection_dsn(connection=connection) if connection.dsn_encrypted else ""
        except SecretUnavailable:
            current = ""  # encrypted under another key: replace it
        if current != wanted:
            db_connection_set_stored_dsn(connection=connection, dsn=wanted)
        return connection

    @staticmethod
    def _policies() -> DocumentCollection:
        """A small document collection so the demo can show search_documents."""
        collection, created = DocumentCollection.objects.get_or_create(
            name=DEMO_COLLECTION, defaults={"business_summary": _("Company policies: refunds, delivery, exchanges")}
        )
        if created:
            for title, body in DEMO_DOCUMENTS:
                Document.objects.create(collection=collection, title=title, body=body)
        return collection

    @staticmethod
    def _role(name: str, *, users: list, connection: DbConnection, whole_database: bool, tables: list[str]) -> Role:
        role, created = Role.objects.get_or_create(name=name)
        if created and users:
            role.users.add(*users)
        DbGrant.objects.get_or_create(
            role=role, connection=connection, defaults={"whole_database": whole_database, "tables": list(tables)}
        )
        return role

    @staticmethod
    def _chat_default() -> LlmModel | None:
        default = FeatureDefault.objects.filter(feature=Feature.CHAT).select_related("model").first()
        if default is not None and default.model is not None:
            return default.model
        candidates = (
            LlmModel.objects.filter(
                provider__kind=ProviderKind.OFFLINE_DEMO, enabled=True, in_config=True, provider__in_config=True
            )
            .select_related("provider")
            .order_by("provider__name", "name")
        )
        model = candidates.first()
        if model is not None:
            feature_default_set(feature=Feature.CHAT, model=model)
        return model

    def _summary(
        self,
        *,
        admin_created: bool,
        staff_created: bool,
        manager_created: bool,
        auditor_created: bool,
        chat_model: LlmModel | None,
        analysed: int | None,
    ) -> None:
        write = self.stdout.write
        write(self.style.SUCCESS(_("Demo data is ready.")))
        if admin_created:
            write(_("  Superuser: admin / admin (created now; change the password)"))
        else:
            write(_("  Superuser: admin (already existed; password unchanged)"))
        if staff_created:
            write(_("  Regular user: staff / staff (created now; role %(role)s)") % {"role": SALES_ROLE})
        else:
            write(_("  Regular user: staff (already existed; password unchanged)"))
        if manager_created:
            write(
                _("  Regular user: manager / manager (created now; roles %(sales)s and %(reveal)s, may reveal tokens)")
                % {"sales": SALES_ROLE, "reveal": REVEAL_ROLE}
            )
        else:
            write(_("  Regular user: manager (already existed; password unchanged)"))
        if auditor_created:
            write(_("  Auditor: auditor / auditor (created now; reads the audit records, changes nothing)"))
        else:
            write(_("  Auditor: auditor (already existed; password unchanged)"))
        write(
            localized_particles(
                _("  Connection %(name)s: role %(sales)s sees the whole database, role %(support)s only %(tables)s.")
                % {
                    "name": DEMO_CONNECTION,
                    "sales": SALES_ROLE,
                    "support": SUPPORT_ROLE,
                    "tables": ", ".join(SUPPORT_TABLES),
                }
            )
        )
        if analysed is not None:
            write(_("  Schema analysed: %(count)d columns classified.") % {"count": analysed})
        if chat_model is not None:
            write(_("  Chat default model: %(model)s") % {"model": chat_model})
        else:
            write(_("  No chat default model is set; choose one in the admin."))
        write(_("Log in at /admin/ (admin) or open / and sign in as staff to chat."))

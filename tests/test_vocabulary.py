"""One vocabulary per concept: personal-data kinds, SQL dialects, provider
tiers and audit tables are each defined once; every other list of them is
derived from, or checked against, that definition here."""

from __future__ import annotations

from pathlib import Path

from governance.pii import kinds


def test_personal_data_kinds_are_one_list():
    from governance.models import PiiKindChoice
    from governance.pii import detectors, lineage, masking
    from governance.schema_analysis import NAME_HINTS

    ids = {kind.value for kind in kinds.PiiKind}
    assert ids == kinds.KIND_IDS
    assert set(PiiKindChoice.values) == ids  # the admin's translated names
    assert set(kinds.TOKEN_LABELS) == set(kinds.PiiKind)
    assert len(set(kinds.TOKEN_LABELS.values())) == len(ids)  # a label names one kind
    assert set(kinds.SEVERITY) == ids and len(kinds.SEVERITY) == len(ids)
    assert detectors.PiiKind is kinds.PiiKind
    assert set(masking.LABEL_BY_KIND) == ids and set(masking.KIND_BY_LABEL) == set(kinds.TOKEN_LABELS.values())
    assert {kind for kind, *_ in NAME_HINTS} <= ids
    assert set(detectors.NORMALISERS) <= ids
    assert tuple(lineage._SEVERITY) == kinds.SEVERITY


def test_dialects_are_one_list():
    from governance.models import SQL_DIALECT_BY_ENGINE, DbEngine
    from governance.pii import lineage
    from governance.sql import dialects, guard

    supported = set(dialects.SUPPORTED_DIALECTS)
    assert set(SQL_DIALECT_BY_ENGINE) == set(DbEngine.values)
    assert set(SQL_DIALECT_BY_ENGINE.values()) == supported
    assert set(dialects.DEFAULT_SCHEMAS) == supported
    assert set(guard._DIALECTS) == supported and set(lineage._DIALECTS) == supported
    assert guard.SUPPORTED_DIALECTS is dialects.SUPPORTED_DIALECTS
    assert lineage.SUPPORTED_DIALECTS is dialects.SUPPORTED_DIALECTS
    # One function allowlist per dialect, and no other.
    lists = Path(guard.__file__).parent / "functions"
    assert {path.stem for path in lists.iterdir() if not path.name.startswith((".", "_"))} == supported
    for engine, dialect in SQL_DIALECT_BY_ENGINE.items():
        assert dialects.dialect_of(engine) == dialect == dialects.dialect_of(dialect)


def test_tiers_are_one_list():
    from governance.models import Tier
    from governance.visibility import decide
    from owlai import install_config

    assert tuple(Tier.values) == install_config.TIERS
    for tier in install_config.TIERS:
        # Every tier gets a decision for every exposure (none raises).
        for exposure in ("all_models", "internal_only"):
            decide(tier=tier, exposure=exposure, granted=True)


def test_audit_tables_are_one_list():
    from django.apps import apps

    from audit import db_roles, retention, sqlite_guards, tables
    from audit.models import AuditDigest, AuditEvent, ToolCallAudit, ToolCallOutcome

    models_tables = {model._meta.db_table for model in (ToolCallAudit, ToolCallOutcome, AuditEvent, AuditDigest)}
    assert set(tables.AUDIT_TABLES) == models_tables
    # Every model of the audit app is an audit table (a new one must be added to the list).
    assert {m._meta.db_table for m in apps.get_app_config("audit").get_models()} == models_tables
    assert set(tables.DIGESTED_TABLES) == {
        ToolCallAudit._meta.db_table,
        ToolCallOutcome._meta.db_table,
        AuditEvent._meta.db_table,
    }
    assert sqlite_guards.GUARDED_TABLES is tables.AUDIT_TABLES
    for module in (db_roles, retention):
        source = Path(module.__file__).read_text()
        assert "from audit.tables import AUDIT_TABLES" in source
        assert "audit_toolcallaudit" not in source  # no second spelling of the names


def test_connector_refusals_and_approval_decisions_are_one_vocabulary():
    from audit.models import EventKind
    from chat import approvals
    from chat.executor.tools.connectors import UNAVAILABLE
    from chat.models import ApprovalStatus
    from governance.visibility import TOOL_UNAVAILABLE

    # The words for any connector tool a turn may not call: defined once.
    assert UNAVAILABLE.msgid == TOOL_UNAVAILABLE
    # Every answer is a status, every settled status has its audit event.
    assert set(approvals.DECISIONS.values()) < set(ApprovalStatus.values)
    assert set(approvals._EVENT_OF) == set(ApprovalStatus.values) - {ApprovalStatus.PENDING}
    assert set(approvals._EVENT_OF.values()) <= set(EventKind.values)


def test_audit_resource_kinds_are_one_list():
    """Every resource kind an audit record is written with is a ResourceKind
    (the screens show and filter them in words); literals in code included."""
    import re

    from audit.models import ResourceKind, resource_kind_label

    root = Path(__file__).resolve().parent.parent
    literals = set()
    for app in ("audit", "governance", "chat"):
        for path in (root / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            literals |= set(re.findall(r'resource_kind\s*=\s*"([^"]*)"', path.read_text(encoding="utf-8")))
    assert literals - {""} <= set(ResourceKind.values), literals - set(ResourceKind.values)
    assert len(set(ResourceKind.labels)) == len(ResourceKind.values)  # a label names one kind
    assert resource_kind_label("db_connection") == str(ResourceKind.DB_CONNECTION.label)


# --- Second spellings in the source ------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
APPS = ("owlai", "accounts", "audit", "governance", "chat")


def string_literals(values: set[str]) -> dict[str, set[str]]:
    """{path relative to the root: the literals of `values` it spells out},
    over the apps' Python source (migrations are history, tests are data)."""
    import ast

    found: dict[str, set[str]] = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            hits = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in values}
            if hits:
                found[str(path.relative_to(ROOT))] = hits
    return found


def test_provider_kinds_are_one_enumeration():
    from chat import model_clients
    from owlai.install_config import DEMO_KIND, PROVIDER_KINDS, ProviderKind

    assert PROVIDER_KINDS == tuple(ProviderKind) and DEMO_KIND is ProviderKind.OFFLINE_DEMO
    # Every kind has a client (an unknown kind is refused by the config loader).
    for kind in ProviderKind:
        assert model_clients.client_for(
            provider_kind=kind, base_url="http://127.0.0.1:9", api_key_env="", model_name="m"
        )
    spelled = string_literals(set(PROVIDER_KINDS))
    # settings.py names the `openai` library's logger, a homonym.
    assert spelled == {"owlai/install_config.py": set(PROVIDER_KINDS), "owlai/settings.py": {"openai"}}


def test_tool_names_are_one_enumeration():
    from chat.executor.registry import REGISTRY
    from governance.visibility import TOOL_SEARCH
    from owlai.tool_names import ToolName

    # Every built-in tool registers under a recorded name (the connector
    # search tool is a source's, named by the same record).
    assert {tool.name for tool in REGISTRY.tools()} == set(ToolName) - {ToolName.SEARCH_CONNECTOR_TOOLS}
    assert TOOL_SEARCH is ToolName.SEARCH_CONNECTOR_TOOLS
    assert string_literals(set(ToolName)) == {"owlai/tool_names.py": set(ToolName)}


def test_refusals_are_never_parsed_back_from_text():
    """A refusal reaches people from its structure (governance.refusals.Reason):
    no module turns its English back into a message with patterns."""
    from governance import refusals

    source = Path(refusals.__file__).read_text(encoding="utf-8")
    assert "import re\n" not in source and "re.compile" not in source


def test_audit_event_types_are_one_registry():
    from audit.event_types import KIND_MAX_LENGTH, EventKind, event_type_choices, event_type_label
    from audit.models import AuditEvent

    values = {value for value, _label in event_type_choices()}
    assert set(EventKind.values) <= values and all(len(v) <= KIND_MAX_LENGTH for v in values)
    assert not AuditEvent._meta.get_field("kind").choices  # a new type needs no migration
    # Written by their constant, never spelled again (a typo would be no record).
    assert string_literals(values) == {"audit/event_types.py": set(EventKind.values)}
    # The coarse kinds older rows hold still read in words, and nothing writes them any more.
    for path in ("accounts", "audit", "governance", "chat"):
        for source in (ROOT / path).rglob("*.py"):
            if "migrations" in source.parts or source.name == "event_types.py":
                continue
            text = source.read_text(encoding="utf-8")
            assert "EventKind.PERMISSION_CHANGE" not in text and "EventKind.SETTINGS_CHANGE" not in text, source
    for old in (EventKind.PERMISSION_CHANGE, EventKind.SETTINGS_CHANGE):
        assert event_type_label(old) == str(old.label) != old.value

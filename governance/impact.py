"""What a governed change would widen, before it applies (audit.confirm shows
it and records it with the change's event).

Each `*_impact(s)` function reads the platform's own data — masking
statistics, role grants and members, resource exposure, the models of each
tier — and returns `audit.confirm.Impact` values (or none: the change widens
nothing and applies directly). The set arithmetic is in pure functions
(`member_gains`, `grant_covers_table`, `atom_text`) tested without a database.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db.models import Q, Sum
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from audit.confirm import Impact, ImpactLine
from audit.models import EventKind, ResourceKind
from governance.grant_diff import WHOLE, RoleGrants, grant_atoms
from governance.models import (
    ColumnClassification,
    Connector,
    DbConnection,
    DbGrant,
    DocumentCollection,
    Exposure,
    FeatureDefault,
    LlmModel,
    MaskStat,
    PiiKindChoice,
    Role,
    Tier,
)

WINDOW_DAYS = 30  # "masked in the last N days", "requests in the last N days"

Atom = tuple[str, str, str]  # as governance.grant_diff: (kind, resource, table)


# --- pure parts ---------------------------------------------------------------------------


def grant_covers_table(*, whole_database: bool, tables: Iterable[str], table: str) -> bool:
    """Whether a DB grant lets its role read `table` (names compared as the
    grant snapshot stores them: stripped, lower-case)."""
    if whole_database:
        return True
    wanted = table.strip().lower()
    return any(isinstance(t, str) and t.strip().lower() == wanted for t in tables)


def _covered(atom: Atom, held: set[Atom]) -> bool:
    kind, resource, _table = atom
    return atom in held or (kind == "db" and ("db", resource, WHOLE) in held)


def member_gains(before: RoleGrants, after: RoleGrants, elsewhere: dict[str, set[Atom]]) -> dict[str, list[Atom]]:
    """{member: atoms they gain by the change}: a member who stays gains what
    the role opened, a member added gains all the role grants after; either
    way less what another role of theirs already gives them (`elsewhere`).
    Members who gain nothing are left out."""
    old, new = grant_atoms(before), grant_atoms(after)
    gains: dict[str, list[Atom]] = {}
    for member in sorted(after.members):
        had = old if member in before.members else set()
        held = elsewhere.get(member, set())
        gained = sorted(atom for atom in new - had if not _covered(atom, held | had))
        if gained:
            gains[member] = gained
    return gains


def atom_text(atom: Atom) -> str:
    """An atom as the record and the page name it (no translated words)."""
    kind, resource, table = atom
    if kind == "db":
        return f"{resource} (*)" if table == WHOLE else f"{resource}: {table}"
    if kind == "permission":
        return "reveal_personal_data"
    return f"{kind}: {resource}"


def atom_label(atom: Atom) -> str:
    """An atom as the page shows it, in the admin's language."""
    kind, resource, table = atom
    if kind == "db":
        if table == WHOLE:
            return _("%(connection)s (whole database)") % {"connection": resource}
        return f"{resource}: {table}"
    if kind == "collection":
        return _("document collection %(name)s") % {"name": resource}
    if kind == "connector":
        return _("connector %(name)s") % {"name": resource}
    return str(_("may reveal personal data"))


# --- reads ---------------------------------------------------------------------------------


def _usernames(user_ids) -> list[str]:
    User = get_user_model()
    return sorted(
        User.objects.filter(pk__in=list(user_ids), is_active=True).values_list(User.USERNAME_FIELD, flat=True)
    )


def _role_members(roles) -> list[str]:
    return _usernames(Role.users.through.objects.filter(role__in=roles).values_list("user_id", flat=True))


def _model_refs(models) -> list[str]:
    return sorted(f"{m.provider.name}/{m.name}" for m in models)


def usable_models(*, tier: str | None = None) -> list[LlmModel]:
    models = LlmModel.objects.select_related("provider").filter(enabled=True, in_config=True, provider__in_config=True)
    if tier is not None:
        models = models.filter(provider__tier=tier)
    return list(models)


def _since():
    return timezone.localdate() - timedelta(days=WINDOW_DAYS)


# --- a column set to "not personal data" ------------------------------------------------


def column_unmask_impacts(classifications: Iterable[ColumnClassification], *, new_kind: str) -> list[Impact]:
    """One impact per column that is masked now and would not be: its values
    would reach the model (and the people reading answers) in clear."""
    if new_kind:
        return []  # another kind still masks the column
    rows = ColumnClassification.objects.select_related("connection").filter(
        pk__in=[c.pk for c in classifications], pii_kind__gt=""
    )
    return [_column_impact(row) for row in rows.order_by("pk")]


def _column_impact(row: ColumnClassification) -> Impact:
    connection = row.connection
    masked = (
        MaskStat.objects.filter(
            connection_id_value=connection.pk,
            table_name=row.table_name,
            column_name=row.column_name,
            day__gte=_since(),
        ).aggregate(total=Sum("count"))["total"]
        or 0
    )
    grants = DbGrant.objects.filter(connection=connection).values_list("role_id", "whole_database", "tables")
    roles = sorted(
        {
            role_id
            for role_id, whole, tables in grants
            if grant_covers_table(whole_database=whole, tables=tables or [], table=row.table_name)
        }
    )
    role_names = sorted(Role.objects.filter(pk__in=roles).values_list("name", flat=True))
    users = _role_members(roles)
    reaches = [Tier.PRIVATE] + ([Tier.PUBLIC] if connection.exposure == Exposure.ALL_MODELS else [])
    facts = {
        "column": f"{connection.name}.{row.table_name}.{row.column_name}",
        "kind_before": row.pii_kind,
        "masked_last_30_days": masked,
        "roles": role_names,
        "users": users,
        "tiers": [str(t) for t in reaches],
    }
    kind_label = dict(PiiKindChoice.choices).get(row.pii_kind, row.pii_kind)
    return Impact(
        change="column_unmask",
        resource_kind=ResourceKind.COLUMN_CLASSIFICATION,
        resource_id=row.pk,
        event_kinds=(EventKind.CLASSIFICATION_SET,),
        title=_("%(column)s: %(kind)s → not personal data") % {"column": facts["column"], "kind": kind_label},
        facts=facts,
        lines=[
            ImpactLine(
                "masked_last_30_days",
                _("Values masked in this column in the last 30 days (they would go out in clear)"),
                masked,
                warn=True,
            ),
            ImpactLine("users", _("Users whose roles may read this table"), users),
            ImpactLine("roles", _("Roles that grant this table"), role_names),
            ImpactLine("tiers", _("Model tiers that would receive the values in clear"), _tier_labels(reaches)),
        ],
    )


def _tier_labels(tiers) -> list[str]:
    labels = dict(Tier.choices)
    return [str(labels.get(t, t)) for t in tiers]


# --- a resource opened to all models --------------------------------------------------------


def _resource_roles(resource) -> list[int]:
    if isinstance(resource, DbConnection):
        return list(DbGrant.objects.filter(connection=resource).values_list("role_id", flat=True).distinct())
    if isinstance(resource, DocumentCollection):
        return list(
            Role.document_collections.through.objects.filter(documentcollection=resource).values_list(
                "role_id", flat=True
            )
        )
    return list(Role.connectors.through.objects.filter(connector=resource).values_list("role_id", flat=True))


def _resource_kind(resource) -> str:
    if isinstance(resource, DbConnection):
        return ResourceKind.DB_CONNECTION
    if isinstance(resource, DocumentCollection):
        return ResourceKind.DOCUMENT_COLLECTION
    return ResourceKind.CONNECTOR


def resource_open_impact(resource: DbConnection | DocumentCollection | Connector) -> Impact | None:
    """Opening an internal-only resource to all models: the public-tier
    models that would start receiving it, and who would start seeing it
    through them (the members of the roles that grant it)."""
    stored = type(resource).objects.filter(pk=resource.pk).values_list("exposure", flat=True).first()
    if stored is None or stored == Exposure.ALL_MODELS:
        return None
    roles = _resource_roles(resource)
    users = _role_members(roles)
    public = _model_refs(usable_models(tier=Tier.PUBLIC))
    facts = {
        "resource": resource.name,
        "users": users,
        "roles": sorted(Role.objects.filter(pk__in=roles).values_list("name", flat=True)),
        "public_models": public,
    }
    lines = [
        ImpactLine("users", _("Users who would start seeing it through public models"), users, warn=True),
        ImpactLine("roles", _("Roles that grant it"), facts["roles"]),
        ImpactLine("public_models", _("Public models that would start receiving its data"), public),
    ]
    if isinstance(resource, DbConnection):
        in_clear = resource.classifications.filter(pii_kind="").count()
        facts["columns_in_clear"] = in_clear
        lines.append(
            ImpactLine("columns_in_clear", _("Columns classified not personal data (sent in clear)"), in_clear)
        )
    return Impact(
        change="resource_open",
        resource_kind=_resource_kind(resource),
        resource_id=resource.pk,
        event_kinds=(EventKind.RESOURCE_OPENED,),
        title=_("%(name)s: opened to all models (cannot be undone)") % {"name": resource.name},
        facts=facts,
        lines=lines,
    )


# --- a role's grants and members --------------------------------------------------------------


def _held_elsewhere(*, role_id: int | None, members: Iterable[str]) -> dict[str, set[Atom]]:
    """What each member's other roles already grant them."""
    from governance.services import role_grants_snapshot

    User = get_user_model()
    memberships = Role.users.through.objects.filter(
        user__in=User.objects.filter(**{f"{User.USERNAME_FIELD}__in": list(members)})
    )
    if role_id is not None:
        memberships = memberships.exclude(role_id=role_id)
    held: dict[str, set[Atom]] = {}
    snapshots: dict[int, set[Atom]] = {}
    for other_role, username in memberships.values_list("role_id", f"user__{User.USERNAME_FIELD}"):
        if other_role not in snapshots:
            snapshots[other_role] = grant_atoms(role_grants_snapshot(role_id=other_role))
        held.setdefault(username, set()).update(snapshots[other_role])
    return held


def _open_to_all_models(atoms: set[Atom]) -> list[str]:
    """The resources among `atoms` that public-tier models may be given."""
    open_names: list[str] = []
    for kind, model in (("db", DbConnection), ("collection", DocumentCollection), ("connector", Connector)):
        names = {resource for atom_kind, resource, _table in atoms if atom_kind == kind}
        if names:
            found = model.objects.filter(name__in=names, exposure=Exposure.ALL_MODELS).values_list("name", flat=True)
            open_names += [atom_text((kind, name, "")) if kind != "db" else name for name in found]
    return sorted(open_names)


def role_grant_impact(*, role_id: int | None, role_name: str, before: RoleGrants, after: RoleGrants) -> Impact | None:
    """A role that grants more (tables, collections, connectors, reveal) or
    gains members: who gains what. None when nobody gains and nothing opens."""
    opened = sorted(grant_atoms(after) - grant_atoms(before))
    gains = member_gains(before, after, _held_elsewhere(role_id=role_id, members=after.members))
    if not opened and not gains:
        return None
    reveal = sorted(member for member, atoms in gains.items() if ("permission", "reveal_personal_data", "") in atoms)
    facts = {
        "role": role_name,
        "opened": [atom_text(a) for a in opened],
        "members_gaining": {member: [atom_text(a) for a in atoms] for member, atoms in gains.items()},
        "reveal_gained_by": reveal,
        "open_to_all_models": _open_to_all_models(set(opened).union(*gains.values())),
    }
    lines = [ImpactLine("opened", _("What the role grants anew"), [atom_label(a) for a in opened])]
    lines.append(
        ImpactLine(
            "members_gaining",
            _("Members who gain access"),
            [f"{member}: {', '.join(map(atom_label, atoms))}" for member, atoms in gains.items()],
            warn=True,
        )
    )
    if reveal or after.reveal_pii and not before.reveal_pii:
        lines.append(
            ImpactLine("reveal_gained_by", _("Members who may reveal personal data from now on"), reveal, warn=True)
        )
    if facts["open_to_all_models"]:
        lines.append(
            ImpactLine(
                "open_to_all_models",
                _("Of these, open to all models (their data also reaches public models)"),
                facts["open_to_all_models"],
                warn=True,
            )
        )
    return Impact(
        change="role_grant",
        resource_kind=ResourceKind.ROLE,
        resource_id=role_id,
        event_kinds=(EventKind.ROLE_UPDATED, EventKind.ROLE_CREATED),
        title=_("Role %(name)s: grants widened") % {"name": role_name},
        facts=facts,
        lines=lines,
    )


# --- a model enabled or disabled ----------------------------------------------------------------


def _model_ref(model: LlmModel) -> str:
    return f"{model.provider.name}/{model.name}"


def model_enable_impact(model: LlmModel) -> Impact | None:
    """Enabling a model: which resources it would be shown (a public model:
    only those open to all models) and who may then use them with it."""
    if LlmModel.objects.filter(pk=model.pk, enabled=True).exists():
        return None
    tier = model.provider.tier
    exposed = Q() if tier == Tier.PRIVATE else Q(exposure=Exposure.ALL_MODELS)
    resources = {
        "connections": sorted(DbConnection.objects.filter(exposed).values_list("name", flat=True)),
        "collections": sorted(DocumentCollection.objects.filter(exposed).values_list("name", flat=True)),
        "connectors": sorted(Connector.objects.filter(exposed).values_list("name", flat=True)),
    }
    roles = Role.objects.filter(
        Q(db_grants__connection__name__in=resources["connections"])
        | Q(document_collections__name__in=resources["collections"])
        | Q(connectors__name__in=resources["connectors"])
    ).distinct()
    users = _role_members(roles)
    shown = [f"{name}" for key in ("connections", "collections", "connectors") for name in resources[key]]
    facts = {"model": _model_ref(model), "tier": tier, **resources, "users": users}
    return Impact(
        change="model_enable",
        resource_kind=ResourceKind.LLM_MODEL,
        resource_id=model.pk,
        event_kinds=(EventKind.MODEL_ENABLED,),
        title=_("%(model)s (%(tier)s): enabled") % {"model": facts["model"], "tier": model.provider.get_tier_display()},
        facts=facts,
        lines=[
            ImpactLine("resources", _("Resources this model would be shown"), shown, warn=tier != Tier.PRIVATE),
            ImpactLine("users", _("Users who may use those resources with it"), users),
        ],
    )


def model_disable_impact(model: LlmModel) -> Impact | None:
    """Disabling a model: the feature defaults it stops being (they are
    cleared) and how many usable models remain."""
    if not LlmModel.objects.filter(pk=model.pk, enabled=True).exists():
        return None
    defaults = sorted(FeatureDefault.objects.filter(model=model).values_list("feature", flat=True))
    remaining = len([m for m in usable_models() if m.pk != model.pk])
    facts = {"model": _model_ref(model), "feature_defaults_cleared": defaults, "usable_models_left": remaining}
    return Impact(
        change="model_disable",
        resource_kind=ResourceKind.LLM_MODEL,
        resource_id=model.pk,
        event_kinds=(EventKind.MODEL_DISABLED,),
        title=_("%(model)s: disabled") % {"model": facts["model"]},
        facts=facts,
        lines=[
            ImpactLine("feature_defaults_cleared", _("Feature defaults it stops being (cleared)"), defaults, warn=True),
            ImpactLine("usable_models_left", _("Usable models left"), remaining),
        ],
    )

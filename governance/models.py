"""Providers, models, data resources and the roles that grant them."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator, URLValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from governance.pii.kinds import KINDS
from governance.sql.dialects import DIALECT_BY_ENGINE
from owlai import install_config


class Tier(models.TextChoices):
    PRIVATE = install_config.PRIVATE, _("Private (stays on-prem)")
    PUBLIC = install_config.PUBLIC, _("Public (leaves the network)")


class Provider(models.Model):
    """Mirror of a provider declared in the install config; never edited in the admin."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    kind = models.CharField(_("kind"), max_length=30)
    tier = models.CharField(_("tier"), max_length=10, choices=Tier.choices)
    base_url = models.CharField(_("base URL"), max_length=500, blank=True)
    api_key_env = models.CharField(_("API key environment variable"), max_length=100, blank=True)
    in_config = models.BooleanField(_("declared in install config"), default=True)
    synced_at = models.DateTimeField(_("last synced"), auto_now=True)

    class Meta:
        verbose_name = _("model provider")
        verbose_name_plural = _("model providers")
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.tier})"


class LlmModel(models.Model):
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="models", verbose_name=_("provider"))
    name = models.CharField(_("name"), max_length=200, help_text=_("As the provider's server knows it."))
    label = models.CharField(_("label"), max_length=200, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    in_config = models.BooleanField(_("declared in install config"), default=True)

    class Meta:
        verbose_name = _("model")
        verbose_name_plural = _("models")
        ordering = ["provider__name", "name"]
        constraints = [models.UniqueConstraint(fields=["provider", "name"], name="uniq_model_per_provider")]

    def __str__(self) -> str:
        return self.label or self.name

    @property
    def tier(self) -> str:
        # A model has no tier of its own: it inherits its provider's.
        return self.provider.tier

    @property
    def usable(self) -> bool:
        return self.enabled and self.in_config and self.provider.in_config


class Feature(models.TextChoices):
    CHAT = "chat", _("Chat")
    DB_ANALYSIS = "db_analysis", _("DB analysis")
    MEETING_SUMMARY = "meeting_summary", _("Meeting summary")


class FeatureDefault(models.Model):
    feature = models.CharField(_("feature"), max_length=30, choices=Feature.choices, unique=True)
    model = models.ForeignKey(
        LlmModel, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("default model")
    )

    class Meta:
        verbose_name = _("feature default model")
        verbose_name_plural = _("feature default models")
        ordering = ["feature"]

    def __str__(self) -> str:
        return f"{self.get_feature_display()}: {self.model or '-'}"


class Exposure(models.TextChoices):
    """Which models may see a resource. Opening is one-way."""

    ALL_MODELS = "all_models", _("All models")
    INTERNAL_ONLY = "internal_only", _("Internal models only")


def validate_schema_list(value: object) -> None:
    """A list of plain schema names (no dots, quotes or blanks)."""
    if not isinstance(value, list) or not all(
        isinstance(name, str) and name.strip() and not any(c in name for c in '."`[]') for name in value
    ):
        raise ValidationError(_('Give a list of schema names, e.g. ["public", "sales"].'))


def default_exposure() -> str:
    """New resources start internal-only whenever the install has a private
    provider, so a forgotten field never opens a resource to external models."""
    # Imported here: the model field default is evaluated at instantiation.
    from governance.exposure import default_exposure_for_install

    return default_exposure_for_install()


def exposure_field() -> models.CharField:
    """The exposure of a resource (DB connection, document collection,
    connector): one definition for all three; the DB triggers keep it one-way."""
    return models.CharField(
        _("exposure"),
        max_length=20,
        choices=Exposure.choices,
        default=default_exposure,
        help_text=_("Internal models only: never shown to, or usable by, turns on external (public) models."),
    )


class DbEngine(models.TextChoices):
    POSTGRESQL = "postgresql", "PostgreSQL"
    MYSQL = "mysql", "MySQL / MariaDB"
    SQLITE = "sqlite", "SQLite"


# sqlglot dialect for each engine: SQL is analysed in the dialect it runs in.
SQL_DIALECT_BY_ENGINE = DIALECT_BY_ENGINE


class DbConnection(models.Model):
    """A company database the agent may query, read-only, through the executor."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    business_summary = models.TextField(_("business summary"), blank=True)
    engine = models.CharField(_("engine"), max_length=20, choices=DbEngine.choices)
    exposure = exposure_field()
    # Where the DSN comes from. Never shown back: either the name of an
    # environment variable (preferred: the secret stays outside the DB), or an
    # encrypted stored value that the admin can replace but not read.
    dsn_env = models.CharField(
        _("DSN environment variable"),
        max_length=100,
        blank=True,
        help_text=_("Name of the environment variable holding the connection URL."),
    )
    dsn_encrypted = models.TextField(_("stored DSN (encrypted)"), blank=True, editable=False)
    # The schemas whose tables a whole-database grant covers (and, on
    # PostgreSQL, the search_path queries run with). System catalogs are never
    # covered: they need a table grant that names them.
    schemas = models.JSONField(
        _("schemas"),
        default=list,
        blank=True,
        validators=[validate_schema_list],
        help_text=_(
            'Schemas a whole-database grant covers, e.g. ["public", "sales"]. Blank: public (PostgreSQL), '
            "main (SQLite), or only the database named in the DSN (MySQL)."
        ),
    )
    row_cap = models.PositiveIntegerField(_("row cap"), default=500)
    statement_timeout_ms = models.PositiveIntegerField(_("statement timeout (ms)"), default=15_000)
    # What schema analysis found of the database's own code in its schemas
    # (governance.sql.database_code): functions, aggregates, operators, casts,
    # SECURITY DEFINER ones flagged. None: not analysed yet. Never called by
    # the executor; listed so the admin knows.
    database_code = models.JSONField(
        _("database's own functions, operators and casts"), null=True, blank=True, editable=False
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("DB connection")
        verbose_name_plural = _("DB connections")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def sql_dialect(self) -> str:
        return SQL_DIALECT_BY_ENGINE[self.engine]

    @property
    def dsn_source(self) -> str:
        if self.dsn_env:
            return f"env:{self.dsn_env}"
        return "stored" if self.dsn_encrypted else "-"


class DocumentCollection(models.Model):
    """A set of documents the agent may search with `search_documents`."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    business_summary = models.TextField(_("business summary"), blank=True)
    exposure = exposure_field()
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("document collection")
        verbose_name_plural = _("document collections")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    collection = models.ForeignKey(
        DocumentCollection, on_delete=models.CASCADE, related_name="documents", verbose_name=_("collection")
    )
    title = models.CharField(_("title"), max_length=300)
    body = models.TextField(_("body"))
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("document")
        verbose_name_plural = _("documents")
        ordering = ["collection", "title"]

    def __str__(self) -> str:
        return self.title


# Connector names become the prefix of the tool names the model sees
# (`<connector>__<tool>`), which providers limit to [A-Za-z0-9_-]{1,64}.
CONNECTOR_NAME_MAX = 30
CONNECTOR_SECRET_ENV_PREFIX = "OWLAI_CONNECTOR_"
validate_connector_name = RegexValidator(
    r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$",
    _("Lowercase letters and digits, words joined by a single '-' or '_' (the name prefixes its tools' names)."),
)
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
# Headers the transport sets itself, or that would change where or how a
# request goes: never taken from a connector's settings.
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "accept", "connection", "transfer-encoding", "cookie", "upgrade"}
)


def validate_secret_headers(value: object) -> None:
    """{"Header-Name": "ENV_VAR_NAME"}: a header's value is read from the named
    environment variable when the connector is called; the value itself is
    never stored. Only OWLAI_CONNECTOR_* variables: a URL typed in the admin
    must not be able to receive the server's own secrets (SECRET_KEY, DSNs)."""
    from owlai.install_config import is_env_name

    if not isinstance(value, dict):
        raise ValidationError(
            _(
                "Give a mapping of header names to environment variable names, "
                'e.g. {"Authorization": "OWLAI_CONNECTOR_CRM_TOKEN"}.'
            )
        )
    for header, env_name in value.items():
        if (
            not isinstance(header, str)
            or not HEADER_NAME.match(header)
            or header.lower() in RESERVED_HEADERS
            or header.lower().startswith("mcp-")
        ):
            raise ValidationError(_("%(header)s cannot be set by a connector.") % {"header": str(header)[:64]})
        if not is_env_name(env_name) or not env_name.startswith(CONNECTOR_SECRET_ENV_PREFIX):
            raise ValidationError(
                _("Header values come from environment variables named %(prefix)s…; %(name)s is not one.")
                % {"prefix": CONNECTOR_SECRET_ENV_PREFIX, "name": str(env_name)[:100]}
            )


class ConnectorTransport(models.TextChoices):
    STREAMABLE_HTTP = "streamable_http", _("Streamable HTTP (URL)")
    STDIO = "stdio", _("Local command (stdio, from the install config)")


class Connector(models.Model):
    """An MCP server the company connected (mail, issue tracker, CRM): a
    resource with an exposure like a DB connection; roles allow it as a whole."""

    name = models.CharField(_("name"), max_length=CONNECTOR_NAME_MAX, unique=True, validators=[validate_connector_name])
    business_summary = models.TextField(_("business summary"), blank=True)
    transport = models.CharField(_("transport"), max_length=20, choices=ConnectorTransport.choices)
    url = models.CharField(
        _("URL"),
        max_length=500,
        blank=True,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text=_("Streamable HTTP endpoint, e.g. https://crm.internal/mcp."),
    )
    command = models.CharField(
        _("command"),
        max_length=100,
        blank=True,
        help_text=_("One of the commands the install config allows (connector_commands)."),
    )
    secret_headers = models.JSONField(
        _("secret headers"),
        default=dict,
        blank=True,
        validators=[validate_secret_headers],
        help_text=_(
            'HTTP headers whose values come from environment variables, e.g. {"Authorization": '
            '"OWLAI_CONNECTOR_CRM_TOKEN"}. Only the variable\'s name is stored.'
        ),
    )
    timeout_seconds = models.PositiveIntegerField(
        _("timeout (s)"), default=30, help_text=_("Longest a tool call may take before it fails.")
    )
    exposure = exposure_field()
    last_synced_at = models.DateTimeField(_("tools last synced"), null=True, blank=True, editable=False)
    last_sync_error = models.CharField(_("last sync error"), max_length=300, blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("connector")
        verbose_name_plural = _("connectors")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        if self.transport == ConnectorTransport.STREAMABLE_HTTP:
            if not self.url.startswith(("http://", "https://")):
                raise ValidationError({"url": _("A streamable HTTP connector needs an http(s) URL.")})
        elif self.transport == ConnectorTransport.STDIO:
            if settings.OWLAI_INSTALL.connector_command(self.command) is None:
                raise ValidationError(
                    {"command": _("Pick one of the commands the install config allows (connector_commands).")}
                )
            if self.secret_headers:
                raise ValidationError({"secret_headers": _("Headers apply to HTTP connectors only.")})


class ConnectorToolState(models.TextChoices):
    ACTIVE = "active", _("Active")
    # The server changed the tool's name, description or input schema since
    # an admin last saw it: not offered, not callable, until reviewed.
    CHANGED = "changed", _("Changed, awaiting review")
    REMOVED = "removed", _("Removed by the server")


class ConnectorToolPolicy(models.TextChoices):
    ALLOW = "allow", _("Allow")
    REQUIRE_APPROVAL = "require_approval", _("Require approval")
    BLOCK = "block", _("Block")


class ConnectorTool(models.Model):
    """One tool a connector's server lists, pinned by the hash of its
    definition. `description` / `input_schema` / `definition_hash` are the
    reviewed definition (what the model may see); a different definition from
    the server waits in the `pending_*` fields until an admin approves it."""

    connector = models.ForeignKey(
        Connector, on_delete=models.CASCADE, related_name="tools", verbose_name=_("connector")
    )
    name = models.CharField(_("name"), max_length=200, help_text=_("As the server names it."))
    # The tool's name in the model's tool list (`<connector>__<slug>`):
    # sanitised, length-limited, unique within the connector.
    slug = models.CharField(_("name for the model"), max_length=32)
    description = models.TextField(_("description"), blank=True)
    input_schema = models.JSONField(_("input schema"), default=dict, blank=True)
    definition_hash = models.CharField(_("pinned definition hash"), max_length=64)
    pending_description = models.TextField(_("changed description"), blank=True)
    pending_input_schema = models.JSONField(_("changed input schema"), null=True, blank=True)
    pending_hash = models.CharField(_("changed definition hash"), max_length=64, blank=True)
    state = models.CharField(
        _("state"), max_length=10, choices=ConnectorToolState.choices, default=ConnectorToolState.ACTIVE
    )
    # The customer knows its connectors' risk: per install, per tool. A tool
    # nobody looked at yet asks a person before each call.
    policy = models.CharField(
        _("policy"), max_length=20, choices=ConnectorToolPolicy.choices, default=ConnectorToolPolicy.REQUIRE_APPROVAL
    )
    first_seen_at = models.DateTimeField(_("first seen"), auto_now_add=True)
    changed_at = models.DateTimeField(_("state changed"), null=True, blank=True)

    class Meta:
        verbose_name = _("connector tool")
        verbose_name_plural = _("connector tools")
        ordering = ["connector__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["connector", "name"], name="uniq_tool_per_connector"),
            models.UniqueConstraint(fields=["connector", "slug"], name="uniq_tool_slug_per_connector"),
        ]

    def __str__(self) -> str:
        return f"{self.connector.name}/{self.name}"


class Role(models.Model):
    name = models.CharField(_("name"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="owlai_roles", verbose_name=_("users")
    )
    document_collections = models.ManyToManyField(
        DocumentCollection, blank=True, related_name="roles", verbose_name=_("document collections")
    )
    # Connectors are allowed as a whole; which tools may run is the install's
    # per-tool policy (ConnectorTool.policy), not the role's.
    connectors = models.ManyToManyField(Connector, blank=True, related_name="roles", verbose_name=_("connectors"))
    can_view_raw_pii = models.BooleanField(
        _("may reveal personal data"),
        default=False,
        help_text=_("Members may reveal the original behind a masked token in their chats (each reveal is audited)."),
    )

    class Meta:
        verbose_name = _("role")
        verbose_name_plural = _("roles")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class DbGrant(models.Model):
    """A role may query a connection: the whole database or only chosen tables."""

    role = models.ForeignKey(Role, on_delete=models.CASCADE, related_name="db_grants", verbose_name=_("role"))
    connection = models.ForeignKey(
        DbConnection, on_delete=models.CASCADE, related_name="grants", verbose_name=_("DB connection")
    )
    whole_database = models.BooleanField(_("whole database"), default=False)
    tables = models.JSONField(
        _("tables"),
        default=list,
        blank=True,
        help_text=_(
            'Table names this role may read, e.g. ["customers", "sales.orders"]. Ignored for a whole-database grant.'
        ),
    )

    class Meta:
        verbose_name = _("DB grant")
        verbose_name_plural = _("DB grants")
        constraints = [models.UniqueConstraint(fields=["role", "connection"], name="uniq_grant_per_role_connection")]

    def __str__(self) -> str:
        scope = _("whole database") if self.whole_database else ", ".join(self.tables)
        return f"{self.role} → {self.connection}: {scope}"


# The admin's translated names of the personal-data kinds, derived from the
# kind records (their admin labels are the msgids), most severe first.
PiiKindChoice = models.TextChoices(
    "PiiKindChoice", [(record.member, (record.id, _(record.admin_label))) for record in KINDS]
)


def pii_kind_choices() -> list[tuple[str, str]]:
    """The classification field's choices: a callable, so that a kind added
    to governance.pii.kinds needs no migration."""
    return PiiKindChoice.choices


class ClassificationSource(models.TextChoices):
    AUTO = "auto", _("Schema analysis")
    MANUAL = "manual", _("Admin")


class ClassificationState(models.TextChoices):
    SUGGESTED = "suggested", _("Suggested")
    CONFIRMED = "confirmed", _("Confirmed")


class ColumnClassification(models.Model):
    """Whether a column of a customer database holds personal data.
    A column classified with a kind is masked whole in every result derived
    from it; an empty kind means "not personal data"."""

    connection = models.ForeignKey(
        DbConnection, on_delete=models.CASCADE, related_name="classifications", verbose_name=_("DB connection")
    )
    table_name = models.CharField(_("table"), max_length=300)
    column_name = models.CharField(_("column"), max_length=300)
    data_type = models.CharField(_("data type"), max_length=100, blank=True)
    pii_kind = models.CharField(_("personal data kind"), max_length=20, choices=pii_kind_choices, blank=True)
    source = models.CharField(_("source"), max_length=10, choices=ClassificationSource.choices)
    state = models.CharField(_("state"), max_length=10, choices=ClassificationState.choices)
    confidence = models.FloatField(_("confidence"), default=0.0)
    sample_size = models.PositiveIntegerField(_("values sampled"), default=0)
    reason = models.CharField(_("reason"), max_length=300, blank=True)
    classified_at = models.DateTimeField(_("classified"), auto_now=True)
    classified_by_id = models.BigIntegerField(_("classified by (user id)"), null=True, blank=True)
    classified_by_username = models.CharField(_("classified by"), max_length=150, blank=True)

    class Meta:
        verbose_name = _("column classification")
        verbose_name_plural = _("column classifications")
        ordering = ["connection__name", "table_name", "column_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["connection", "table_name", "column_name"], name="uniq_column_per_connection"
            )
        ]

    def __str__(self) -> str:
        return f"{self.connection}.{self.table_name}.{self.column_name}"


class ClassificationRevision(models.Model):
    """One row whose token changes, by database trigger, with every insert,
    update or delete of any ColumnClassification (migration 0005).

    The executor reads the token in the same query as the grant check and
    keeps the analysed schema cached per (connection, token): an edit takes
    effect on the next query without a classification query on every call.
    Triggers, not signals, so bulk updates and direct SQL count too; a random
    token, not a counter, so a rolled-back change can never make an old
    token come back with other contents. No row (e.g. a flushed test
    database) means "unknown": nothing is cached."""

    token = models.CharField(max_length=64)

    class Meta:
        verbose_name = _("classification revision")
        verbose_name_plural = _("classification revisions")

    def __str__(self) -> str:
        return self.token


class MaskStat(models.Model):
    """How often values were masked, per column and kind and day, so an admin
    can spot an over-masked column and downgrade it."""

    connection_id_value = models.BigIntegerField(_("connection id"), null=True)
    table_name = models.CharField(_("table"), max_length=300, blank=True)
    column_name = models.CharField(_("column"), max_length=300, blank=True)
    pii_kind = models.CharField(_("kind"), max_length=20)
    day = models.DateField(_("day"))
    count = models.PositiveIntegerField(_("masked values"), default=0)

    class Meta:
        verbose_name = _("masking statistic")
        verbose_name_plural = _("masking statistics")
        constraints = [
            models.UniqueConstraint(
                fields=["connection_id_value", "table_name", "column_name", "pii_kind", "day"], name="uniq_mask_stat"
            )
        ]

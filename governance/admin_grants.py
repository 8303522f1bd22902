"""A role's DB grants in the admin: the tables a grant names are picked from
the connection's analysed schema (governance.schema_analysis), not typed as
JSON, and checked again on the server before anything is saved."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from governance.grant_diff import WHOLE, RoleGrants
from governance.models import DbConnection, DbGrant
from governance.schema_analysis import analysed_tables


def _value(connection_id: int, table: str) -> str:
    # One checkbox per (connection, table): the same table name in two
    # connections is two different grants.
    return f"{connection_id}:{table}"


class GrantTablesWidget(forms.CheckboxSelectMultiple):
    """Checkboxes grouped by connection; the page's script shows only the
    group of the connection chosen in the same row (without the script every
    group shows, and the server refuses a table of another connection)."""

    template_name = "governance/widgets/grant_tables.html"

    def __init__(self, *args, connections=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.connections = list(connections)  # [(id, name)]

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        options = {}
        for _group, subwidgets, _index in context["widget"]["optgroups"]:
            for option in subwidgets:
                connection_id = str(option["value"]).partition(":")[0]
                options.setdefault(connection_id, []).append(option)
        context["widget"]["connections"] = [
            {"id": str(pk), "name": label, "options": options.get(str(pk), [])} for pk, label in self.connections
        ]
        return context


class DbGrantForm(forms.ModelForm):
    """`analysed` ({connection id: [tables]}) and `connections` are set per
    request by DbGrantInline.get_formset (one query for every row)."""

    analysed: dict[int, list[str]] = {}
    connections: list[tuple[int, str]] = []

    tables = forms.MultipleChoiceField(
        label=gettext_lazy("tables"),
        required=False,
        help_text=gettext_lazy(
            "Tables of the chosen connection, as its schema analysis found them. A table that is not listed: "
            "run Analyse schema on the connection first. Ignored for a whole-database grant."
        ),
    )

    class Meta:
        model = DbGrant
        fields = ("connection", "whole_database", "tables")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kept = self._stored_tables()
        groups = []
        for connection_id, name in self.connections:
            listed = list(self.analysed.get(connection_id, []))
            extra = sorted(self.kept.get(connection_id, set()) - set(listed))
            choices = [(_value(connection_id, t), t) for t in listed]
            # Granted before and no longer (or never) in the analysis: still
            # shown and checked, so saving the role loses nothing.
            choices += [
                (_value(connection_id, t), _("%(table)s (not in the analysed schema)") % {"table": t}) for t in extra
            ]
            groups.append((name, choices))
        field = self.fields["tables"]
        field.choices = groups
        field.widget = GrantTablesWidget(connections=self.connections, choices=groups)
        if self.instance.pk and self.instance.connection_id:
            self.initial["tables"] = [_value(self.instance.connection_id, t) for t in self.instance.tables or []]

    def _stored_tables(self) -> dict[int, set[str]]:
        if not self.instance.pk or not self.instance.connection_id:
            return {}
        stored = [t for t in (self.instance.tables or []) if isinstance(t, str) and t.strip()]
        return {self.instance.connection_id: set(stored)}

    def clean(self):
        cleaned = super().clean()
        connection: DbConnection | None = cleaned.get("connection")
        if connection is None:
            return cleaned
        allowed = set(self.analysed.get(connection.pk, [])) | self.kept.get(connection.pk, set())
        tables, errors = [], []
        for value in cleaned.get("tables") or []:
            connection_id, _sep, table = value.partition(":")
            if connection_id != str(connection.pk):
                errors.append(
                    _("Table %(table)s is not a table of %(connection)s.") % {"table": table, "connection": connection}
                )
            elif table not in allowed:
                errors.append(
                    _(
                        "Table %(table)s is not in the analysed schema of %(connection)s: run Analyse schema on the "
                        "connection first."
                    )
                    % {"table": table, "connection": connection}
                )
            else:
                tables.append(table)
        if errors:
            self.add_error("tables", errors)
        elif not cleaned.get("whole_database") and not tables and not cleaned.get("DELETE"):
            self.add_error("tables", _("Choose the whole database or at least one table."))
        cleaned["tables"] = sorted(set(tables))
        return cleaned


class DbGrantInline(admin.TabularInline):
    model = DbGrant
    form = DbGrantForm
    extra = 0
    fields = ("connection", "whole_database", "tables")

    class Media:
        js = ["governance/grant_tables.js"]

    def get_formset(self, request, obj=None, **kwargs):
        # The analysed schema, read once for all the rows of the page.
        connections = list(DbConnection.objects.order_by("name").values_list("pk", "name"))
        form = type(
            "DbGrantForm",
            (self.form,),
            {"analysed": analysed_tables(connection_ids=[pk for pk, _name in connections]), "connections": connections},
        )
        return super().get_formset(request, obj, form=form, **kwargs)


def posted_grants(form, formsets) -> RoleGrants:
    """The grants a role's form and DB-grant inline would save (validated,
    not saved yet), in the shape of role_grants_snapshot."""
    databases: dict[str, set[str]] = {}
    for formset in formsets:
        if formset.model is not DbGrant:
            continue
        for row in formset.forms:
            data = getattr(row, "cleaned_data", None) or {}
            if not data.get("connection") or (formset.can_delete and formset._should_delete_form(row)):
                continue
            tables = {t.strip().lower() for t in data.get("tables") or [] if isinstance(t, str) and t.strip()}
            databases.setdefault(data["connection"].name, set()).update(
                {WHOLE} if data.get("whole_database") else tables
            )
    cleaned = form.cleaned_data
    return RoleGrants(
        databases={name: frozenset(scope) for name, scope in databases.items() if scope},
        collections=frozenset(c.name for c in cleaned.get("document_collections") or []),
        members=frozenset(u.get_username() for u in cleaned.get("users") or []),
        reveal_pii=bool(cleaned.get("can_view_raw_pii")),
        connectors=frozenset(c.name for c in cleaned.get("connectors") or []),
    )

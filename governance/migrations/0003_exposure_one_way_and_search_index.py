"""Database guards for exposure and the document search index.

- Exposure is one-way: a trigger refuses any UPDATE that turns an
  `all_models` resource back to `internal_only`, so not even direct SQL on the
  database can make the flag lie about data that may already have left.
- PostgreSQL full-text index over document title and body.
"""

from django.db import migrations

from governance.sqlite_triggers import exposure_trigger_statements

RESOURCE_TABLES = ("governance_dbconnection", "governance_documentcollection")

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION owlai_exposure_one_way() RETURNS trigger AS $$
BEGIN
    IF OLD.exposure = 'all_models' AND NEW.exposure IS DISTINCT FROM 'all_models' THEN
        RAISE EXCEPTION 'exposure is one-way: % id % was opened to all models and cannot be made internal-only again',
            TG_TABLE_NAME, OLD.id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
"""

# Must match the expression chat.documents uses, or the index is not used.
PG_SEARCH_INDEX = """
CREATE INDEX IF NOT EXISTS governance_document_fts ON governance_document
USING gin (to_tsvector('simple'::regconfig, COALESCE(title, '') || ' ' || COALESCE(body, '')));
"""


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        # params=None: the function body contains literal % placeholders of RAISE.
        schema_editor.execute(PG_FUNCTION, params=None)
        for table in RESOURCE_TABLES:
            schema_editor.execute(
                f"CREATE TRIGGER owlai_exposure_one_way BEFORE UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION owlai_exposure_one_way()"
            )
        schema_editor.execute(PG_SEARCH_INDEX)
    elif vendor == "sqlite":
        for statement in exposure_trigger_statements():
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for table in RESOURCE_TABLES:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS owlai_exposure_one_way ON {table}")
        schema_editor.execute("DROP FUNCTION IF EXISTS owlai_exposure_one_way()")
        schema_editor.execute("DROP INDEX IF EXISTS governance_document_fts")
    elif vendor == "sqlite":
        for table in RESOURCE_TABLES:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS owlai_exposure_one_way_{table}")


class Migration(migrations.Migration):
    dependencies = [("governance", "0002_exposure_and_documents")]

    operations = [migrations.RunPython(forwards, backwards)]

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0007_connectors"),
    ]

    operations = [
        migrations.AddField(
            model_name="dbconnection",
            name="database_code",
            field=models.JSONField(
                blank=True, editable=False, null=True, verbose_name="database's own functions, operators and casts"
            ),
        ),
    ]

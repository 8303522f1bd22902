from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("chat", "0008_turn_last_seq")]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="origin",
            field=models.CharField(default="chat", max_length=20, verbose_name="origin"),
        ),
        migrations.AddField(
            model_name="turn",
            name="origin_ref",
            field=models.CharField(blank=True, max_length=100, verbose_name="origin reference"),
        ),
    ]

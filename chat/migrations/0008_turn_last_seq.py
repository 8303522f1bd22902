from django.db import migrations, models
from django.db.models import Max, OuterRef, Subquery
from django.db.models.functions import Coalesce


def number_from_stored_events(apps, schema_editor):
    """Existing turns continue after the events they already stored."""
    Turn = apps.get_model("chat", "Turn")
    TurnEvent = apps.get_model("chat", "TurnEvent")
    last = TurnEvent.objects.filter(turn_id=OuterRef("pk")).values("turn_id").annotate(m=Max("seq")).values("m")
    Turn.objects.update(last_seq=Coalesce(Subquery(last), 0))


class Migration(migrations.Migration):
    dependencies = [("chat", "0007_tool_approvals")]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="last_seq",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(number_from_stored_events, migrations.RunPython.noop),
    ]

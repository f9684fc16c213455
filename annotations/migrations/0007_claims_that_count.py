"""Unit counters follow the one definition of "this answer counts".

``Unit.n_completed`` used to count completed claims of active assignments too, and rejected work
kept its slots. Now rejected work gives its slots back (its claims are released) and
``n_completed`` counts only claims of submitted or approved assignments
(``annotations.selectors.claims_that_count``). This migration brings stored rows to that rule:
claims of rejected assignments are released, then both counters are recounted from the claims."""
from django.db import migrations, models
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce


def recount(apps, schema_editor):
    Assignment = apps.get_model("annotations", "Assignment")
    Claim = apps.get_model("annotations", "Claim")
    Unit = apps.get_model("annotations", "Unit")
    db = schema_editor.connection.alias
    rejected = Assignment.objects.using(db).filter(status="rejected").values("id")
    Claim.objects.using(db).filter(assignment_id__in=rejected, released=False).update(released=True)

    def count(condition):
        per_unit = (
            Claim.objects.using(db).filter(condition, unit_id=OuterRef("pk"), released=False)
            .order_by().values("unit_id").annotate(n=Count("id")).values("n")
        )
        return Coalesce(Subquery(per_unit, output_field=models.IntegerField()), 0)

    # Both counters in one UPDATE: the check constraint n_completed <= n_claimed holds throughout.
    Unit.objects.using(db).update(
        n_claimed=count(Q()),
        n_completed=count(Q(completed_at__isnull=False, assignment__status__in=["submitted", "approved"])),
    )


class Migration(migrations.Migration):

    dependencies = [
        ('annotations', '0006_installation_id'),
    ]

    operations = [
        migrations.AlterField(
            model_name='claim',
            name='released',
            field=models.BooleanField(default=False, help_text='Given back: its assignment expired, was returned or was rejected; the place went back to the pool.'),
        ),
        migrations.RunPython(recount, migrations.RunPython.noop),
    ]

"""Held work leaves ``Unit.n_completed`` (issue 23 item 4).

Work that sync put on hold (a platform worker id that is not the participant's, not cleared) used to
stay in ``n_completed`` while scoring, exports and progress left it out. Now the counter is exactly
``annotations.selectors.claims_that_count``; this brings the units that held work touches to it.
``n_claimed`` does not change: held work keeps its slot."""
from django.db import migrations, models
from django.db.models import Count, Exists, OuterRef, Subquery
from django.db.models.functions import Coalesce


def recount_held(apps, schema_editor):
    Claim = apps.get_model("annotations", "Claim")
    PlatformSubmission = apps.get_model("annotations", "PlatformSubmission")
    Unit = apps.get_model("annotations", "Unit")
    db = schema_editor.connection.alias
    held = PlatformSubmission.objects.using(db).filter(
        flag="worker_mismatch", cleared_at__isnull=True, assignment__isnull=False).values("assignment_id")
    units = Claim.objects.using(db).filter(assignment_id__in=held, unit__isnull=False).values("unit_id")
    on_hold = Exists(PlatformSubmission.objects.using(db).filter(
        assignment_id=OuterRef("assignment_id"), flag="worker_mismatch", cleared_at__isnull=True))
    per_unit = (
        Claim.objects.using(db).filter(unit_id=OuterRef("pk"), released=False, completed_at__isnull=False,
                                       assignment__status__in=["submitted", "approved"])
        .filter(~on_hold).order_by().values("unit_id").annotate(n=Count("id")).values("n")
    )
    Unit.objects.using(db).filter(pk__in=units).update(
        n_completed=Coalesce(Subquery(per_unit, output_field=models.IntegerField()), 0))


class Migration(migrations.Migration):

    dependencies = [
        ("annotations", "0014_link_tasks"),
    ]

    operations = [
        migrations.RunPython(recount_held, migrations.RunPython.noop),
    ]

# One word for each thing: a unit placed in an assignment is a "claim" (was AssignmentUnit), and
# MTurk / Prolific / links are "platforms" (was "provider"). Renames only; no data changes.
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotations", "0004_unit_unique_partial"),
        ("studies", "0004_study_platform"),
    ]

    operations = [
        migrations.RenameModel("AssignmentUnit", "Claim"),
        migrations.RemoveConstraint("participant", "participant_unique_per_provider"),
        migrations.RenameField("participant", "provider", "platform"),
        migrations.AddConstraint(
            "participant",
            models.UniqueConstraint(fields=["platform", "external_id"], name="participant_unique_per_platform"),
        ),
        migrations.RenameField("assignment", "provider_assignment_id", "platform_assignment_id"),
        migrations.RenameField("assignment", "provider_task_id", "platform_task_id"),
        migrations.RemoveConstraint("publication", "publication_one_per_batch"),
        migrations.RenameField("publication", "provider", "platform"),
        migrations.AddConstraint(
            "publication",
            models.UniqueConstraint(fields=["study", "platform", "batch", "dry_run"], name="publication_one_per_batch"),
        ),
        migrations.RenameModel("ProviderCall", "PlatformCall"),
        migrations.RemoveConstraint("platformcall", "provider_call_amount_not_negative"),
        migrations.RenameField("platformcall", "provider", "platform"),
        migrations.RenameField("platformcall", "provider_token", "platform_token"),
        migrations.AddConstraint(
            "platformcall",
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="platform_call_amount_not_negative"),
        ),
        migrations.RenameField("bonus", "provider_call", "platform_call"),
        migrations.RenameModel("ProviderSubmission", "PlatformSubmission"),
        migrations.RemoveConstraint("platformsubmission", "provider_submission_unique"),
        migrations.RenameField("platformsubmission", "provider_assignment_id", "platform_assignment_id"),
        migrations.RenameField("platformsubmission", "provider_task_id", "platform_task_id"),
        migrations.RenameField("platformsubmission", "provider_status", "platform_status"),
        migrations.AddConstraint(
            "platformsubmission",
            models.UniqueConstraint(fields=["publication", "platform_assignment_id"], name="platform_submission_unique"),
        ),
        migrations.RenameIndex("platformcall", new_name="annotations_study_i_864ee1_idx",
                               old_name="annotations_study_i_bc0b1f_idx"),
        migrations.AlterField(
            "participant", "platform",
            models.CharField(choices=[("link", "Participant links"), ("prolific", "Prolific"),
                                      ("mturk", "Amazon Mechanical Turk")], max_length=20),
        ),
        migrations.AlterField(
            "platformcall", "assignment",
            models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                              related_name="platform_calls", to="annotations.assignment"),
        ),
        migrations.AlterField(
            "platformcall", "study",
            models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                              related_name="platform_calls", to="studies.study"),
        ),
        migrations.AlterField(
            "platformsubmission", "assignment",
            models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                              related_name="platform_submissions", to="annotations.assignment"),
        ),
    ]

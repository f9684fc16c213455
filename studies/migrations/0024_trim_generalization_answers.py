"""A generalization question's answer stored with white space around it is written as the label
workers are offered and answer with (``studies.choices.as_label``; see
``annotations 0032_trim_correct_answers``): answers are compared with it exactly. No other data
changes; a no-op where none has spaces."""
from django.db import migrations


def trim_generalization_answers(apps, schema_editor):
    question = apps.get_model("studies", "GeneralizationQuestion")
    for pk, value in question.objects.values_list("pk", "answer").iterator():
        if value != value.strip():
            question.objects.filter(pk=pk).update(answer=value.strip())


class Migration(migrations.Migration):
    dependencies = [("studies", "0023_generator_job_import_user_protect")]
    operations = [migrations.RunPython(trim_generalization_answers, migrations.RunPython.noop, elidable=True)]

"""Right answers stored with white space around them ("Yes " for the choice "Yes ") are written as
the label workers are offered and answer with ("Yes": ``studies.choices.as_label``). Before, a
plain-string choice kept its spaces on the page while an answer was trimmed, so such a choice could
not be answered; now it is offered trimmed, and every comparison of an answer with its right answer
(the grading, the reviewers' list in SQL, scoring column-wise) is exact, so a right answer must be a
label as offered. No other data changes; a no-op where none has spaces."""
from django.db import migrations

TRIMMED = (("AttentionCheck", "correct_answer"), ("QualificationQuestion", "correct_answer"))


def trim_correct_answers(apps, schema_editor):
    for model_name, field in TRIMMED:
        model = apps.get_model("annotations", model_name)
        for pk, value in model.objects.values_list("pk", field).iterator():
            if value != value.strip() and value.strip():  # white space only: no label to write
                model.objects.filter(pk=pk).update(**{field: value.strip()})


class Migration(migrations.Migration):
    dependencies = [("annotations", "0031_publication_link_review_user_protect")]
    operations = [migrations.RunPython(trim_correct_answers, migrations.RunPython.noop, elidable=True)]

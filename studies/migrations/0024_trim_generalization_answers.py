"""A generalization question's answer stored with white space around it is written as the label
workers are offered and answer with (``studies.choices.as_label``; see
``annotations 0032_trim_correct_answers``): answers are compared with it exactly. The Gen-U
predictions graded against it are graded again in the same step, by the rule of
``studies.services.grading.prediction_correct`` (a blank prediction is wrong), as every change
of a question's answer does. An answer of white space only is left as it is (no label to write;
the row cannot be saved empty). No other data changes; a no-op where none has spaces."""
from django.db import migrations


def trim_generalization_answers(apps, schema_editor):
    question = apps.get_model("studies", "GeneralizationQuestion")
    prediction = apps.get_model("studies", "GenUPrediction")
    for pk, value in question.objects.values_list("pk", "answer").iterator():
        trimmed = value.strip()
        if value == trimmed or not trimmed:
            continue
        question.objects.filter(pk=pk).update(answer=trimmed)
        for row in prediction.objects.filter(generalization_question_id=pk).only("pk", "predicted_answer", "correct"):
            correct = bool(row.predicted_answer) and row.predicted_answer == trimmed
            if correct != row.correct:
                prediction.objects.filter(pk=row.pk).update(correct=correct)


class Migration(migrations.Migration):
    dependencies = [("studies", "0023_generator_job_import_user_protect")]
    operations = [migrations.RunPython(trim_generalization_answers, migrations.RunPython.noop, elidable=True)]

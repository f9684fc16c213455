"""Model paths under ``RL_MODEL_DIR`` kept relative to it (``models:<path>``,
``studies.services.model_paths.model_path_stored``), so a database restored beside a moved model
directory still names its checkpoints and their ownership holds. Converted: the absolute (or ``.``
/ ``~``) paths that lie under the current ``RL_MODEL_DIR`` in rationale sources' and question
generators' ``model_name_or_path``, Gen-U predictions' ``answerer_model`` and the model paths of
jobs' params (:data:`JOB_PARAMS`). Reversed: the stored forms back to absolute paths under the
current ``RL_MODEL_DIR``. Anything else (hub names, paths elsewhere) is left as it is."""
from django.db import migrations

# The params of a job that name a model path: fine-tuning's base model, faithfulness's task model,
# Quark's policy path and its policy spec's model, the registered checkpoint and Quark's run folder.
JOB_PARAMS = ("base_model", "task_model", "policy_path", "checkpoint", "run_folder")
FIELDS = (("RationaleSource", "model_name_or_path"), ("QuestionGenerator", "model_name_or_path"),
          ("GenUPrediction", "answerer_model"))


def _stored(text):
    from studies.services.model_paths import model_path_stored

    return model_path_stored(text) if isinstance(text, str) else text


def _absolute(text):
    from studies.services.model_paths import MODEL_DIR_PREFIX, model_location

    return model_location(text) if isinstance(text, str) and text.startswith(MODEL_DIR_PREFIX) else text


def _convert(apps, convert):
    for model_name, field in FIELDS:
        model = apps.get_model("studies", model_name)
        for pk, value in model.objects.exclude(**{field: ""}).values_list("pk", field).iterator():
            new = convert(value)
            if new != value:
                model.objects.filter(pk=pk).update(**{field: new})
    Job = apps.get_model("studies", "GenerationJob")
    for job in Job.objects.only("pk", "params").iterator():
        params = job.params if isinstance(job.params, dict) else None
        if not params:
            continue
        new = {key: convert(value) if key in JOB_PARAMS else value for key, value in params.items()}
        policy = new.get("policy")
        if isinstance(policy, dict) and "model" in policy:
            new["policy"] = {**policy, "model": convert(policy["model"])}
        if new != params:
            Job.objects.filter(pk=job.pk).update(params=new)


def forwards(apps, schema_editor):
    _convert(apps, _stored)


def backwards(apps, schema_editor):
    _convert(apps, _absolute)


class Migration(migrations.Migration):

    dependencies = [
        ('studies', '0018_generationjob_chain'),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]

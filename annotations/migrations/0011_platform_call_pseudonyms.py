"""Audit rows name workers by pseudonym: rewrite the rows written before that.

Blocks and qualification grants were keyed by the raw WorkerId (``mturk:block:<id>``,
``mturk:qualgrant:<type>:<id>``) and request summaries carried ``worker_id``; keys were listed
and searchable in the admin by researchers who may not see raw worker ids. The key's worker id
becomes the pseudonym (what new calls use; blocking or granting again is harmless anyway) and the
summary's ``worker_id`` becomes ``worker`` (the pseudonym). Money is unaffected: bonus keys carry the bonus token and
approve / reject keys the platform assignment id, neither a worker id, so no key that guards a
payment changes and a retried payment still finds its row. A bonus whose outcome is still
unknown is reconciled with the raw id of its assignment's participant, not the summary's. The
pseudonym is keyed by ``RL_PSEUDONYM_SALT`` as it is when the migration runs."""
from django.db import migrations

from lab.pseudonyms import worker_pseudonym


def forwards(apps, schema_editor):
    PlatformCall = apps.get_model("annotations", "PlatformCall")
    for call in PlatformCall.objects.filter(request_summary__has_key="worker_id").iterator():
        summary = dict(call.request_summary)
        raw = str(summary.pop("worker_id") or "")
        summary["worker"] = worker_pseudonym(call.platform, raw) if raw else ""
        call.request_summary = summary
        fields = ["request_summary"]
        if raw and call.operation in ("block", "associate_qualification") and call.idempotency_key.endswith(":" + raw):
            call.idempotency_key = call.idempotency_key[: -len(raw)] + summary["worker"]
            fields.append("idempotency_key")
        call.save(update_fields=fields)


class Migration(migrations.Migration):

    dependencies = [
        ('annotations', '0010_worker_block'),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]

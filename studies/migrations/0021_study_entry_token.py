"""Study.entry_token unique (an index: the entry page finds its study by it), each new study getting
random values for it and Study.completion_code; 0020 filled every study that existed. A migration of
its own, so the constraint is made after 0020's rows are committed. Both columns still allow NULL: a
row inserted by code that does not know them (the previous release while a deploy runs, a migration's
historical model) is valid, and gets its values when they are first read
(``studies.services.studies.study_public_ids``)."""
from django.db import migrations, models

import studies.models.core


class Migration(migrations.Migration):

    dependencies = [
        ("studies", "0020_study_entry_token_fill"),
    ]

    operations = [
        migrations.AlterField(
            model_name="study",
            name="entry_token",
            field=models.CharField(
                default=studies.models.core.study_entry_token_new, editable=False, max_length=64, null=True, unique=True,
                help_text="The token of the study's public entry URL (/w/s/<token>/); never changes."),
        ),
        migrations.AlterField(
            model_name="study",
            name="completion_code",
            field=models.CharField(
                default=studies.models.core.study_completion_code_new, editable=False, max_length=16, null=True,
                help_text="The completion code workers get back unless the study's Prolific publication stores "
                          "one; never changes."),
        ),
    ]

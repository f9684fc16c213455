"""Study.entry_token unique (an index: the entry page finds its study by it) and, with
Study.completion_code, required, each new study getting random ones; 0020 filled every study
that existed. A migration of its own, so the constraint is made after 0020's rows are committed."""
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
                default=studies.models.core.study_entry_token_new, editable=False, max_length=64, unique=True,
                help_text="The token of the study's public entry URL (/w/s/<token>/); never changes."),
        ),
        migrations.AlterField(
            model_name="study",
            name="completion_code",
            field=models.CharField(
                default=studies.models.core.study_completion_code_new, editable=False, max_length=16,
                help_text="The completion code workers get back unless the study's Prolific publication stores "
                          "one; never changes."),
        ),
    ]

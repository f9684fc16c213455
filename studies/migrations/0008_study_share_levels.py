# Sharing gets a level (issue 20, item 8). The relation keeps its table (studies_study_shared_with),
# now the table of the explicit through model StudyShare: the model is declared on the existing
# table (state only), then the level column is added. Shares made before levels existed granted
# change and pay (to holders of those permissions), so they become "pay" and behave as before;
# new shares default to "view".

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

LEVELS = [
    ("view", "view: read the study, its answers, scores and exports"),
    ("change", "change: also change its design and content; open and close it"),
    ("pay", "pay: also publish it and move money (approve, reject, bonus, block)"),
]


class Migration(migrations.Migration):

    dependencies = [
        ('studies', '0007_generationjob_quark'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='StudyShare',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name='ID')),
                        ('study', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                    related_name='shares', to='studies.study')),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                   to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'verbose_name': 'share',
                        'db_table': 'studies_study_shared_with',
                        'unique_together': {('study', 'user')},
                    },
                ),
                migrations.AlterField(
                    model_name='study',
                    name='shared_with',
                    field=models.ManyToManyField(blank=True, related_name='shared_studies',
                                                 through='studies.StudyShare', to=settings.AUTH_USER_MODEL),
                ),
            ],
            database_operations=[],
        ),
        # Existing rows: the level they effectively had.
        migrations.AddField(
            model_name='studyshare',
            name='level',
            field=models.CharField(choices=LEVELS, default='pay', max_length=10),
        ),
        # New rows: view unless the owner says more.
        migrations.AlterField(
            model_name='studyshare',
            name='level',
            field=models.CharField(choices=LEVELS, default='view', max_length=10),
        ),
    ]

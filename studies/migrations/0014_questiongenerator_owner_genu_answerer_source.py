"""QuestionGenerator.created_by and GenUPrediction.answerer_source.

A question generator now has an owner, the researcher who made it; the rows made before have none
(``created_by`` NULL): who read and change them is ``studies.selectors.question_generators_for_user``.
A Gen-U prediction now records the rationale source that answered it; the rows written before do not
(``answerer_source`` NULL), and the readers fall back to their ``answerer_model`` path for those only.
Neither is guessed for existing rows: a generator's first job need not be its maker's, and two
sources may share a model path."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("studies", "0013_generationjob_by_operator"),
    ]

    operations = [
        migrations.AddField(
            model_name="questiongenerator",
            name="created_by",
            field=models.ForeignKey(
                blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+",
                to=settings.AUTH_USER_MODEL,
                help_text="Its researcher; empty: the operator's (made by a command, or before generators had owners).",
            ),
        ),
        migrations.AddField(
            model_name="genuprediction",
            name="answerer_source",
            field=models.ForeignKey(
                blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                related_name="answered_genu_predictions", to="studies.rationalesource",
                help_text="The rationale source that answered; empty for predictions from before it was recorded.",
            ),
        ),
    ]

"""Study.reward and Study.hourly_pay_floor: the help text names the currency.

They said "(USD)", but on Prolific the amounts are published and checked in RL_PROLIFIC_CURRENCY
(``annotations.platforms.prolific.currency``): the help now says the platform's currency. Help text
only; no column changes."""
from decimal import Decimal

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("studies", "0014_questiongenerator_owner_genu_answerer_source"),
    ]

    operations = [
        migrations.AlterField(
            model_name="study",
            name="reward",
            field=models.DecimalField(
                decimal_places=2, default=Decimal("2.00"),
                help_text="Base pay per task, in the platform's currency (Prolific: the RL_PROLIFIC_CURRENCY "
                          "setting; MTurk: USD).",
                max_digits=8),
        ),
        migrations.AlterField(
            model_name="study",
            name="hourly_pay_floor",
            field=models.DecimalField(
                decimal_places=2, default=Decimal("15.00"),
                help_text="Minimum effective hourly pay, in the platform's currency (Prolific: the "
                          "RL_PROLIFIC_CURRENCY setting; MTurk: USD).",
                max_digits=8),
        ),
    ]

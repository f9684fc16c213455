"""Where the platforms' money settings and idempotency tokens come from: RL_* settings declared in
config/settings (never os.environ in the apps), fee rates from settings, and tokens built from
the installation's stored id, so rotating SECRET_KEY never pays the same bonus twice."""
from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from annotations.models import Bonus, Installation
from annotations.platforms.mturk import MTurkPlatform
from annotations.platforms.prolific import ProlificPlatform
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.tokens import bonus_token, publication_request_token
from tests.annotations.platforms.conftest import PROLIFIC_TOKEN, publish_on, submitted

ROOT = Path(__file__).resolve().parents[3]


def test_the_platforms_read_no_environment_variable():
    """Apps read configuration only through django.conf.settings."""
    offenders = []
    for path in sorted((ROOT / "annotations").rglob("*.py")):
        text = path.read_text()
        if re.search(r"\bos\.environ\b|\bos\.getenv\b|\bgetenv\(", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_prolific_token_is_the_setting(settings, prolific_server, monkeypatch):
    monkeypatch.delenv("RL_PROLIFIC_TOKEN", raising=False)
    settings.RL_PROLIFIC_TOKEN = PROLIFIC_TOKEN
    assert ProlificPlatform(base_url=prolific_server.api_url).find_study(internal_name="none") is None
    assert prolific_server.requests[0]["headers"]["authorization"] == f"Token {PROLIFIC_TOKEN}"


def test_fee_rates_come_from_settings(settings):
    platform = MTurkPlatform(client=object(), endpoint="https://mturk-requester-sandbox.us-east-1.amazonaws.com")
    settings.RL_MTURK_FEE_RATE = "0.25"
    settings.RL_MTURK_LARGE_HIT_FEE_RATE = "0.50"
    small = platform.estimate_cost(spec_reward=Decimal("2.00"), n_tasks=9, max_assignments_per_hit=9)
    large = platform.estimate_cost(spec_reward=Decimal("2.00"), n_tasks=10, max_assignments_per_hit=10)
    assert (small.fee_rate, small.fees) == (Decimal("0.25"), Decimal("4.50"))
    assert (large.fee_rate, large.fees) == (Decimal("0.50"), Decimal("10.00"))
    settings.RL_PROLIFIC_FEE_RATE = "0.42"
    prolific = ProlificPlatform(base_url="http://127.0.0.1:9/api/v1/")
    assert prolific.estimate_cost(spec_reward=Decimal("1.00"), n_tasks=10).fees == Decimal("4.20")


def test_tokens_carry_the_stored_installation_id_not_the_secret_key(settings, study):
    # The migration made the row; a transactional test run before this one on the same database
    # flushed it, and the first token makes it again (installation_tag makes it on first use).
    before = publication_request_token(study=study, platform="mturk", batch=1)
    installation = Installation.objects.get()
    settings.SECRET_KEY = "a-rotated-secret-key-of-enough-length-1234567890"
    assert publication_request_token(study=study, platform="mturk", batch=1) == before
    assert before.startswith(f"rl{installation.installation_id}-")


def test_rotating_the_secret_key_never_pays_the_same_bonus_again(prolific, study, settings):
    """Regression (issue 11): tokens were derived from SECRET_KEY, so after a key rotation the
    same bonus got a new token, a new Bonus row, and was paid a second time."""
    platform, server = prolific
    publication = publish_on(study, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id="p1")
    work = submitted(study, platform="prolific", worker_id="p1", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)
    first = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.75"), reason="Consistently good work.", kind="good_work")
    token = bonus_token(assignment=work, amount=Decimal("0.75"), kind="good_work", reason="Consistently good work.")

    settings.SECRET_KEY = "a-rotated-secret-key-of-enough-length-1234567890"
    again = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.75"), reason="Consistently good work.", kind="good_work")

    assert again.pk == first.pk and again.token == token
    assert Bonus.objects.count() == 1
    assert len(server.payments) == 1
    assert server.submissions[sub["id"]]["bonus_payments"] == [75]

"""``quark_train --out DIR`` is checked before a step is trained, as ``score_study --out`` is before
scoring: an ``--out`` that cannot take ``report.json`` is a CommandError naming it, with no job run
and no source registered (before, the error came as a traceback after the job had registered its
source, the report lost)."""
import pytest
from django.core.management import CommandError, call_command

from studies.models import GenerationJob, RationaleSource

pytestmark = [pytest.mark.lm, pytest.mark.django_db, pytest.mark.usefixtures("fresh_quark_runs")]
pytest.importorskip("torch")

# The smallest run of ``test_quark_job``'s tiny T5: one step, evaluated once.
SMALLEST = ["--steps", "1", "--checkpoint-every", "1", "--max-accuracy-drop", "1", "--warmup-steps", "0",
            "--sample-interval", "10", "--samples-per-item", "1", "--max-new-tokens", "8", "--batch-size", "4",
            "--train-limit", "2", "--validation-limit", "2", "--heldout-limit", "2", "--register-without-gain"]


@pytest.fixture
def t5_source(lm_models):
    return RationaleSource.objects.create(name="tiny-t5", kind="lm", backend="seq2seq",
                                          model_name_or_path=str(lm_models["t5"]))


def _train(out):
    call_command("quark_train", "--policy", "tiny-t5", "--dataset", "strategyqa", "--reward", "marker:is",
                 *SMALLEST, "--out", str(out))


def test_an_out_that_is_a_file_is_refused_before_training(t5_source, splits, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a folder\n")
    with pytest.raises(CommandError, match=rf"--out: cannot write the report to {taken}: it is not a folder; "
                                           r"nothing trained\."):
        _train(taken)
    assert taken.read_text() == "not a folder\n"
    assert not GenerationJob.objects.exists()
    assert list(RationaleSource.objects.values_list("name", flat=True)) == ["tiny-t5"]


def test_an_out_whose_parent_is_a_file_is_refused_before_training(t5_source, splits, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CommandError, match=r"--out: cannot write the report to .*nothing trained\."):
        _train(tmp_path / "file" / "run")
    assert not GenerationJob.objects.exists()


def test_a_usable_out_is_created_and_gets_the_report(t5_source, splits, tmp_path):
    _train(tmp_path / "new" / "run")
    assert (tmp_path / "new" / "run" / "report.json").is_file()
    assert not [p for p in (tmp_path / "new" / "run").iterdir() if p.name != "report.json"]

"""Help texts and docstrings say which values SPEC gives and which are ours (the project's rule:
never call a value the paper's unless SPEC says the paper says it; never deny what SPEC does give)."""
from __future__ import annotations

from studies.lm.quark import QuarkSettings
from studies.management.commands.finetune_t5 import Command as FinetuneCommand
from studies.management.commands.quark_train import Command as QuarkCommand


def _help(command) -> str:
    return " ".join(command().create_parser("manage.py", "cmd").format_help().split())


def test_quark_settings_say_spec_section_9_gives_the_defaults_both_presets_use():
    doc = " ".join(QuarkSettings.__doc__.split())
    assert "gives none of these values" not in doc
    assert "SPEC section 9 gives Quark's defaults, which both presets use" in doc
    defaults = QuarkSettings.from_json({})
    reference = QuarkSettings.from_json({"preset": "reference"})
    for settings in (defaults, reference):  # what the docstring says both presets use
        assert (settings.n_reward_tokens, settings.kl_coef, settings.entropy_coef, settings.lr) == (5, 0.05, 0.06, 1e-5)
        assert settings.warmup_steps > 0


def test_help_says_what_spec_does_not_say_and_what_is_ours():
    assert "(SPEC does not say; recorded as an override)" in _help(FinetuneCommand)
    assert "not the paper's" not in _help(FinetuneCommand)
    assert "ours: SPEC says only that the paper kept task accuracy" in _help(QuarkCommand)

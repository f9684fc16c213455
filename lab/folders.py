"""An output folder a command writes into, checked before its work starts (``score_study --out``,
``quark_train --out``): the one owner of that check, below every app."""
from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def output_folder_prepare(out_dir: str | Path, *, probe_prefix: str, files: Iterable[str] = ()) -> Path:
    """``out_dir`` created if missing (with its parents) and checked to take the caller's files, by
    making and removing a folder in it (named ``probe_prefix``..., as the caller's first write would):
    an OSError naming the path when it is not a folder, cannot be created or written to, or holds one
    of ``files`` (the names the caller writes) as something other than a file."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "it is not a folder", str(out))
    out.mkdir(parents=True, exist_ok=True)
    for name in files:
        if (out / name).exists() and not (out / name).is_file():
            raise IsADirectoryError(errno.EISDIR, "it is not a file", str(out / name))
    os.rmdir(tempfile.mkdtemp(prefix=probe_prefix, dir=out))
    return out

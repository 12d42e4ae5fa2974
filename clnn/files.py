"""Atomic file writes: a file replaces its path only once it is completely written (temp file + os.replace)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], text: bool = False, chmod: int | None = None) -> Iterator[IO]:
    """A file (binary, or ``text``) that replaces ``path`` only once the ``with`` block finishes without an
    error; ``chmod`` sets its permission bits (the temp file's are 0o600)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w" if text else "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if chmod is not None:
            os.chmod(tmp, chmod)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

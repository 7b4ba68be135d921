"""The files the arena writes, each whole or not at all: a temporary file in the same
directory, fsync, rename, directory fsync. JSON, text and bytes only: the standard library,
so that results and reports are written without safetensors or torch (the weights and
checkpoints are :mod:`.checkpoints`)."""

from __future__ import annotations

import errno
import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "read_json"]


@functools.cache
def _file_mode() -> int:  # what open() would give; mkstemp gives 0o600
    os.umask(umask := os.umask(0))
    return 0o666 & ~umask


def _fsync_directory(directory: Path) -> None:
    """Fsync ``directory`` so a rename in it is on disk; skipped where unsupported."""
    if os.name == "nt":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # some file systems refuse fsync on a directory
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (parents created) so that it holds its old or its new
    content, never part of either: on any exception or a kill the previous file is untouched
    (and on an exception the temporary file is removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the same directory: a rename across file systems would be a copy, not atomic
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            # data on disk before the rename: otherwise the rename may reach the disk first
            # and a crash leaves an empty or partial file under the final name
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)  # the rename (a directory entry) on disk too


def atomic_write_text(path: str | Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON (indent 1, trailing newline) atomically.

    Raises:
        TypeError, ValueError: ``obj`` is not JSON-serialisable or holds NaN or infinity
            (JSON has neither). It is serialised first, so then the disk is untouched.
    """
    atomic_write_text(path, json.dumps(obj, indent=1, allow_nan=False) + "\n")


def read_json(path: str | Path) -> Any:
    """The JSON value in ``path``; ``ValueError`` naming the path when it is not valid JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e

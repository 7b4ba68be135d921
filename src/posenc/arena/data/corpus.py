"""The arena's training text: byte-level tokens from the Python standard library or a user corpus.

The default corpus is the ``.py`` files of the running Python's standard library, read at run
time (nothing is downloaded or shipped). ``--corpus PATH`` takes a text file or a folder of
text files instead. Files are split into train and validation BY FILE, by a hash of their
relative path, so the split does not depend on the file system's order; a single file is split
at a byte offset. The batches drawn from it are :mod:`posenc.arena.data.batches`.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "Corpus",
    "CorpusError",
    "load_corpus",
    "stdlib_root",
]

_SNIFF = 8192  # a file with a NUL in its first 8 KiB is binary
_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
_LINE_SEARCH = 4096  # how far from the split offset a line start may be


class CorpusError(ValueError):
    """A corpus that cannot be used; the message names the path and what was wrong."""


@dataclass(frozen=True)
class Corpus:
    """Train and validation bytes.

    Shapes:
        train: ``[n]`` uint8; valid: ``[m]`` uint8 (files joined with ``b"\\n"``).

    ``source`` is the path read, or ``"Python standard library at <dir>"``. A single file
    counts once in each of ``n_train_files`` and ``n_valid_files`` (it is split by offset).
    """

    train: torch.Tensor
    valid: torch.Tensor
    source: str
    n_files: int
    n_train_files: int
    n_valid_files: int

    def sha256(self) -> str:
        """A digest of the training and validation bytes (and where one ends): the same
        digest means the same data, whatever path or Python it came from."""
        digest = hashlib.sha256(self.train.numpy().tobytes())
        digest.update(b"\0valid\0")
        digest.update(self.valid.numpy().tobytes())
        return digest.hexdigest()


def stdlib_root() -> Path:
    """The running Python's standard library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def load_corpus(
    path: str | Path | None = None,
    *,
    max_bytes: int | None = None,
    valid_fraction: float = 0.05,
    min_bytes: int = 1024,
) -> Corpus:
    """Load a corpus and split it into train and validation bytes.

    Args:
        path: a text file, a folder (every text file in it, recursively; hidden files and
            folders, binary and unreadable files skipped), or None for the ``.py`` files of
            the standard library (:func:`stdlib_root`, without site-packages).
        max_bytes: read about this many bytes at most: files are taken in the order of their
            path's crc32 (a spread over the folder) until train holds ``max_bytes *
            (1 - valid_fraction)`` and validation ``max_bytes * valid_fraction``; files are
            kept whole. A single file is read up to ``max_bytes``.
        valid_fraction: the share of validation, in ``(0, 1)``. A file of a folder goes to
            validation when ``crc32(relative posix path) % 1000 < valid_fraction * 1000``;
            if one set would be empty, the file with the smallest crc moves to it.
        min_bytes: each of train and validation must hold at least this many bytes.

    Raises:
        CorpusError: the path does not exist, cannot be read, is binary or empty, holds no
            text files, or gives train or validation fewer than ``min_bytes`` bytes.
    """
    if not isinstance(valid_fraction, (int, float)) or not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction!r}")
    if max_bytes is not None and (
        not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1
    ):
        raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes!r}")
    if not isinstance(min_bytes, int) or isinstance(min_bytes, bool) or min_bytes < 1:
        raise ValueError(f"min_bytes must be a positive int, got {min_bytes!r}")

    if path is None:
        root = stdlib_root()
        source = f"Python standard library at {root}"
        files = _list_files(root, suffix=".py", excluded=_EXCLUDED_DIRS)
        corpus = _load_files(root, files, source, max_bytes, valid_fraction)
    else:
        p = Path(path)
        source = str(p)
        if not p.exists():
            raise CorpusError(f"corpus {p}: does not exist")
        if p.is_dir():
            corpus = _load_files(p, _list_files(p), source, max_bytes, valid_fraction)
        else:
            corpus = _load_single(p, max_bytes, valid_fraction)

    for name, part in (("train", corpus.train), ("validation", corpus.valid)):
        if part.numel() < min_bytes:
            raise CorpusError(
                f"corpus {source}: too small for training: {name} has {part.numel()} bytes, "
                f"at least {min_bytes} are needed (train {corpus.train.numel()}, "
                f"validation {corpus.valid.numel()} bytes from {corpus.n_files} file(s))"
            )
    return corpus


def _list_files(
    root: Path, suffix: str | None = None, excluded: frozenset[str] = frozenset()
) -> list[Path]:
    """Regular files under ``root`` (ending in ``suffix`` if given), recursively, sorted by
    path; hidden entries, folders named in ``excluded`` and folders that cannot be listed are
    skipped (``root`` itself must be listable)."""
    found: list[Path] = []
    try:
        top = list(os.scandir(root))
    except PermissionError as e:
        raise CorpusError(f"corpus {root}: cannot be read (permission denied)") from e
    except OSError as e:
        raise CorpusError(f"corpus {root}: cannot be read ({e.strerror or e})") from e
    stack = [top]
    while stack:
        for entry in stack.pop():
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in excluded:
                        try:
                            stack.append(list(os.scandir(entry.path)))
                        except OSError:
                            continue
                elif entry.is_file() and (suffix is None or entry.name.endswith(suffix)):
                    found.append(Path(entry.path))
            except OSError:
                continue
    found.sort()
    return found


def _crc(root: Path, file: Path) -> int:
    return zlib.crc32(file.relative_to(root).as_posix().encode("utf-8"))


def _read(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path`` (the first ``limit`` at most); OSError as the caller's."""
    with path.open("rb") as f:
        return f.read() if limit is None else f.read(limit)


def _why_not_text(data: bytes, truncated: bool = False) -> str | None:
    """Why ``data`` is not text (a NUL in its first 8 KiB, or not UTF-8), or None.
    A ``truncated`` read may end inside a UTF-8 character."""
    if b"\x00" in data[:_SNIFF]:
        return "a binary file (NUL byte in its first 8 KiB)"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=not truncated)
    except UnicodeDecodeError as e:
        return f"a binary file (not UTF-8 at byte {e.start})"
    return None


def _load_single(path: Path, max_bytes: int | None, valid_fraction: float) -> Corpus:
    try:
        data = _read(path, max_bytes)
    except PermissionError as e:
        raise CorpusError(f"corpus {path}: cannot be read (permission denied)") from e
    except OSError as e:
        raise CorpusError(f"corpus {path}: cannot be read ({e.strerror or e})") from e
    why = _why_not_text(data, truncated=max_bytes is not None and len(data) == max_bytes)
    if why is not None:
        raise CorpusError(f"corpus {path}: {why}")
    if not data.strip():
        raise CorpusError(f"corpus {path}: empty (or only whitespace)")
    cut = _split_offset(data, valid_fraction)
    return Corpus(_tensor(data[:cut]), _tensor(data[cut:]), str(path), 1, 1, 1)


def _split_offset(data: bytes, valid_fraction: float) -> int:
    """The offset where validation starts: the last ``valid_fraction`` of ``data``, moved to
    the nearest line start within ``_LINE_SEARCH`` bytes (and within a quarter of the
    validation part) when there is one."""
    cut = round(len(data) * (1.0 - valid_fraction))
    cut = min(max(cut, 1), len(data) - 1) if len(data) > 1 else cut
    reach = min(_LINE_SEARCH, (len(data) - cut) // 4)
    before = data.rfind(b"\n", max(cut - reach - 1, 0), cut)
    after = data.find(b"\n", cut, min(cut + reach, len(data) - 1))
    starts = [i + 1 for i in (before, after) if i >= 0 and 0 < i + 1 < len(data)]
    return min(starts, key=lambda s: abs(s - cut)) if starts else cut


def _load_files(
    root: Path, files: list[Path], source: str, max_bytes: int | None, valid_fraction: float
) -> Corpus:
    """Read ``files`` in crc order into train and validation (whole files), up to the quotas."""
    threshold = valid_fraction * 1000
    order = sorted((_crc(root, f), f.relative_to(root).as_posix(), f) for f in files)
    want_train = want_valid = float("inf")
    if max_bytes is not None:
        want_train, want_valid = max_bytes * (1 - valid_fraction), max_bytes * valid_fraction
    # (crc, bytes) per set, in crc order
    train: list[tuple[int, bytes]] = []
    valid: list[tuple[int, bytes]] = []
    have_train = have_valid = 0
    skipped = 0
    for crc, _, file in order:
        if have_train >= want_train and have_valid >= want_valid:
            break
        to_valid = crc % 1000 < threshold
        if (have_valid >= want_valid) if to_valid else (have_train >= want_train):
            continue  # that set is full: do not read the file
        try:
            data = _read(file)
        except OSError:
            skipped += 1
            continue
        if _why_not_text(data) is not None or not data.strip():
            skipped += 1
            continue
        if to_valid:
            valid.append((crc, data))
            have_valid += len(data)
        else:
            train.append((crc, data))
            have_train += len(data)

    if not train and not valid:
        detail = f" ({skipped} skipped: binary, empty or unreadable)" if skipped else ""
        raise CorpusError(f"corpus {source}: a folder with no text files{detail}")
    if len(train) + len(valid) == 1:
        # one text file: split it at an offset, as a single file
        data = (train or valid)[0][1]
        cut = _split_offset(data, valid_fraction)
        return Corpus(_tensor(data[:cut]), _tensor(data[cut:]), source, 1, 1, 1)
    # an empty set takes the other's file with the smallest crc (lists are in crc order)
    if not valid:
        valid.append(train.pop(0))
    elif not train:
        train.append(valid.pop(0))
    return Corpus(
        train=_tensor(b"\n".join(d for _, d in train)),
        valid=_tensor(b"\n".join(d for _, d in valid)),
        source=source,
        n_files=len(train) + len(valid),
        n_train_files=len(train),
        n_valid_files=len(valid),
    )


def _tensor(data: bytes) -> torch.Tensor:
    if not data:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)

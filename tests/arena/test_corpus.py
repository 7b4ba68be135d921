import os
import re
import time
import zlib
from pathlib import Path

import pytest
import torch

from posenc.arena.data import corpus as corpus_module
from posenc.arena.data.corpus import Corpus, CorpusError, load_corpus, stdlib_root

MAX_BYTES = 2_000_000


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _text(i, size=600):
    """A distinct text of about ``size`` bytes, each line marked with ``i``."""
    lines, n = [], 0
    while n < size:
        line = f"file {i} line {len(lines)}: some words to train on\n"
        lines.append(line)
        n += len(line)
    return "".join(lines)


def _as_bytes(t):
    return bytes(t.tolist())


@pytest.fixture(scope="module")
def stdlib_corpus():
    return load_corpus(max_bytes=MAX_BYTES)


def test_default_corpus(stdlib_corpus):
    c = stdlib_corpus
    assert c.source == f"Python standard library at {stdlib_root()}"
    assert c.train.dtype == c.valid.dtype == torch.uint8
    assert c.train.dim() == c.valid.dim() == 1
    assert c.n_files == c.n_train_files + c.n_valid_files
    assert c.n_train_files > 10 and c.n_valid_files >= 1
    # max_bytes respected up to whole files: each set reaches its quota and stops there
    assert c.train.numel() >= MAX_BYTES * 0.95
    assert c.valid.numel() >= MAX_BYTES * 0.05
    assert c.train.numel() + c.valid.numel() < MAX_BYTES * 1.5
    assert b"def " in _as_bytes(c.train[:200_000])


def test_default_corpus_deterministic(stdlib_corpus):
    again = load_corpus(max_bytes=MAX_BYTES)
    assert torch.equal(again.train, stdlib_corpus.train)
    assert torch.equal(again.valid, stdlib_corpus.valid)
    assert (again.n_train_files, again.n_valid_files) == (
        stdlib_corpus.n_train_files,
        stdlib_corpus.n_valid_files,
    )


def test_default_corpus_fast():
    start = time.perf_counter()
    c = load_corpus(max_bytes=8_000_000)
    assert time.perf_counter() - start < 2.0
    assert c.train.numel() >= 8_000_000 * 0.95


def test_default_corpus_split_by_file(stdlib_corpus):
    """Each file read is whole in exactly one set, the one its crc says."""
    root = stdlib_root()
    train, valid = _as_bytes(stdlib_corpus.train), _as_bytes(stdlib_corpus.valid)
    checked = 0
    for path in sorted(root.glob("*.py"))[:60]:
        data = path.read_bytes()
        if len(data) < 2000:
            continue
        in_train, in_valid = data in train, data in valid
        assert not (in_train and in_valid), path
        crc = zlib.crc32(path.relative_to(root).as_posix().encode())
        if in_valid:
            assert crc % 1000 < 50, path
            checked += 1
        if in_train:
            assert crc % 1000 >= 50, path
            checked += 1
    assert checked > 0


def test_no_site_packages(stdlib_corpus):
    assert stdlib_corpus.n_files > 0
    listed = corpus_module._list_files(stdlib_root(), ".py", corpus_module._EXCLUDED_DIRS)
    assert listed and all(p.suffix == ".py" for p in listed)
    excluded = {"site-packages", "dist-packages", "__pycache__"}
    assert not any(excluded & set(p.parts) for p in listed)


def _folder(tmp_path, n=20, size=600):
    root = tmp_path / "texts"
    for i in range(n):
        sub = root / f"d{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}.txt").write_text(_text(i, size))
    return root


def test_folder_split_by_crc(tmp_path):
    root = _folder(tmp_path, n=40)
    c = load_corpus(root, valid_fraction=0.3, min_bytes=1)
    assert c.source == str(root)
    train, valid = _as_bytes(c.train), _as_bytes(c.valid)
    expect_valid = set()
    for path in root.rglob("*.txt"):
        data = path.read_bytes()
        crc = zlib.crc32(path.relative_to(root).as_posix().encode())
        in_valid = data in valid
        assert in_valid != (data in train), path  # in exactly one set
        assert in_valid == (crc % 1000 < 300), path
        expect_valid |= {path} if in_valid else set()
    assert c.n_valid_files == len(expect_valid) > 0
    assert c.n_train_files == 40 - len(expect_valid) > 0
    # files joined with "\n", in crc order
    order = sorted(
        root.rglob("*.txt"), key=lambda p: zlib.crc32(p.relative_to(root).as_posix().encode())
    )
    joined = b"\n".join(p.read_bytes() for p in order if p in expect_valid)
    assert valid == joined


def test_folder_skips_binary_hidden_and_empty(tmp_path):
    root = _folder(tmp_path, n=10)
    (root / "blob.bin").write_bytes(b"abc\x00def" * 100)
    (root / "latin.txt").write_bytes("caf\xe9 ".encode("latin-1") * 100)
    (root / "blank.txt").write_text("   \n\n")
    (root / ".hidden.txt").write_text("HIDDEN FILE\n" * 100)
    (root / ".git").mkdir()
    (root / ".git" / "notes.txt").write_text("HIDDEN DIR\n" * 100)
    c = load_corpus(root, valid_fraction=0.3, min_bytes=1)
    both = _as_bytes(c.train) + _as_bytes(c.valid)
    assert c.n_files == 10
    assert b"\x00" not in both and b"HIDDEN" not in both and b"caf" not in both


def test_folder_max_bytes(tmp_path):
    root = _folder(tmp_path, n=60, size=1000)
    full = load_corpus(root, valid_fraction=0.2, min_bytes=1)
    capped = load_corpus(root, valid_fraction=0.2, max_bytes=10_000, min_bytes=1)
    assert capped.train.numel() >= 8_000 and capped.valid.numel() >= 2_000
    # stops once both are full: whole files, each set at most one file over its quota
    assert capped.train.numel() < 8_000 + 1_100 and capped.valid.numel() < 2_000 + 1_100
    assert capped.n_files < full.n_files
    # the files taken are the lowest crcs of each set
    files = sorted(root.rglob("*.txt"))
    crc = {p: zlib.crc32(p.relative_to(root).as_posix().encode()) for p in files}
    train_files = sorted((p for p in files if crc[p] % 1000 >= 200), key=crc.get)
    expected = b"\n".join(p.read_bytes() for p in train_files[: capped.n_train_files])
    assert _as_bytes(capped.train) == expected


def test_empty_set_takes_smallest_crc(tmp_path):
    root = tmp_path / "few"
    root.mkdir()
    names = [f"f{i}.txt" for i in range(5)]
    for i, name in enumerate(names):
        (root / name).write_text(_text(i, 2000))
    # no crc is below 1, so validation would be empty: the smallest crc moves there
    c = load_corpus(root, valid_fraction=0.001)
    smallest = min(names, key=lambda n: zlib.crc32(n.encode()))
    assert zlib.crc32(smallest.encode()) % 1000 >= 1
    assert _as_bytes(c.valid) == (root / smallest).read_bytes()
    assert (c.n_train_files, c.n_valid_files) == (4, 1)


def test_single_file(tmp_path):
    path = tmp_path / "book.txt"
    text = "".join(f"line {i} of the book\n" for i in range(2000))  # no line starts at 90%
    path.write_text(text)
    c = load_corpus(path, valid_fraction=0.1)
    train, valid = _as_bytes(c.train), _as_bytes(c.valid)
    assert train + valid == text.encode()
    assert valid.startswith(b"line ")  # at a line start
    assert abs(len(valid) - 0.1 * len(text)) < 100
    assert (c.n_files, c.n_train_files, c.n_valid_files) == (1, 1, 1)
    capped = load_corpus(path, valid_fraction=0.1, max_bytes=20_000)
    assert _as_bytes(capped.train) + _as_bytes(capped.valid) == text.encode()[:20_000]


def test_single_file_without_newlines(tmp_path):
    path = tmp_path / "one_line.txt"
    path.write_text("x" * 5000)
    c = load_corpus(path, valid_fraction=0.2, min_bytes=10)
    assert (c.train.numel(), c.valid.numel()) == (4000, 1000)


def test_error_missing(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))}.*does not exist"):
        load_corpus(path)


def test_error_binary_file(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"text\x00" * 1000)
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))}.*binary"):
        load_corpus(path)
    path.write_bytes("caf\xe9\n".encode("latin-1") * 1000)
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))}.*not UTF-8"):
        load_corpus(path)


def test_error_empty(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))}.*empty"):
        load_corpus(path)
    path.write_text("  \n\t\n")
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))}.*empty"):
        load_corpus(path)


def test_error_folder_without_text(tmp_path):
    root = tmp_path / "bins"
    root.mkdir()
    (root / "a.bin").write_bytes(b"\x00\x01" * 100)
    with pytest.raises(CorpusError, match=f"{re.escape(str(root))}.*no text files"):
        load_corpus(root)
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(CorpusError, match=f"{re.escape(str(empty))}.*no text files"):
        load_corpus(empty)


def test_error_too_small(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("a short line\n" * 200)  # 2600 bytes: 130 to validation
    with pytest.raises(
        CorpusError, match=rf"{re.escape(str(path))}.*too small.*validation has 130 bytes"
    ):
        load_corpus(path)
    root = _folder(tmp_path, n=4, size=300)
    with pytest.raises(
        CorpusError, match=rf"{re.escape(str(root))}.*too small.*has \d+ bytes.*at least 1024"
    ):
        load_corpus(root, valid_fraction=0.5)


def test_error_unreadable(tmp_path, monkeypatch):
    path = tmp_path / "secret.txt"
    path.write_text(_text(0, 5000))
    real_open = Path.open

    def refuse(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))}.*permission denied"):
        load_corpus(path)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads all")
def test_error_unreadable_chmod(tmp_path):
    path = tmp_path / "secret.txt"
    path.write_text(_text(0, 5000))
    path.chmod(0)
    try:
        with pytest.raises(CorpusError, match=f"{re.escape(str(path))}.*permission denied"):
            load_corpus(path)
    finally:
        path.chmod(0o644)


def test_error_unreadable_folder_file_skipped(tmp_path, monkeypatch):
    root = _folder(tmp_path, n=10)
    locked = root / "d0" / "f0.txt"
    real_open = Path.open

    def refuse(self, *args, **kwargs):
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    c = load_corpus(root, valid_fraction=0.3, min_bytes=1)
    assert c.n_files == 9
    assert b"file 0 line" not in _as_bytes(c.train) + _as_bytes(c.valid)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="valid_fraction"):
        load_corpus(valid_fraction=0.0)
    with pytest.raises(ValueError, match="valid_fraction"):
        load_corpus(valid_fraction=1.0)
    with pytest.raises(ValueError, match="max_bytes"):
        load_corpus(max_bytes=0)
    with pytest.raises(ValueError, match="min_bytes"):
        load_corpus(min_bytes=0)


def test_corpus_is_frozen(stdlib_corpus):
    assert isinstance(stdlib_corpus, Corpus)
    with pytest.raises(AttributeError):
        stdlib_corpus.source = "x"  # type: ignore[misc]

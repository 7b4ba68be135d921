import pytest
import torch

from posenc.arena.data.tasks import (
    BOS,
    EOS,
    IGNORE,
    KV_BOS,
    KV_VOCAB,
    N_KEYS,
    N_SYMBOLS,
    N_VALUES,
    PAD,
    QUERY,
    SEP,
    SEQUENCE_VOCAB,
    TaskBatch,
    kv_batch,
    kv_length,
    sequence_batch,
    sequence_length,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _sequence_row(x, task, max_length):
    """The expected (inputs, targets) of one copy / reverse row, built by hand."""
    n = len(x)
    y = list(x) if task == "copy" else list(reversed(x))
    row = [BOS, *x, SEP, *y, EOS] + [PAD] * (2 * (max_length - n))
    inputs, targets = row[:-1], row[1:]
    # scored: the targets y1..yn and EOS, i.e. input positions n+1 (SEP) .. 2n+1
    targets = [t if n + 1 <= i <= 2 * n + 1 else IGNORE for i, t in enumerate(targets)]
    return inputs, targets


def test_vocab_layout():
    assert (BOS, SEP, EOS, PAD) == (16, 17, 18, 19)
    assert SEQUENCE_VOCAB == N_SYMBOLS + 4 == 20
    assert (KV_BOS, QUERY) == (128, 129)
    assert KV_VOCAB == N_KEYS + N_VALUES + 2 == 130


def test_hand_example_rows():
    # the reference builder itself, on a case worked out by hand
    inputs, targets = _sequence_row([3, 5], "reverse", max_length=3)
    assert inputs == [BOS, 3, 5, SEP, 5, 3, EOS, PAD]
    assert targets == [IGNORE, IGNORE, IGNORE, 5, 3, EOS, IGNORE, IGNORE]
    inputs, targets = _sequence_row([3, 5], "copy", max_length=2)
    assert inputs == [BOS, 3, 5, SEP, 3, 5]
    assert targets == [IGNORE, IGNORE, IGNORE, 3, 5, EOS]


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_sequence_batch_format(task):
    max_length = 7
    batch = sequence_batch(task, 64, 1, max_length, _gen())
    assert batch.inputs.shape == batch.targets.shape == (64, sequence_length(max_length))
    assert batch.inputs.dtype == batch.targets.dtype == torch.int64
    lengths = set()
    for row_in, row_t in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        n = row_in.index(SEP) - 1
        lengths.add(n)
        x = row_in[1 : n + 1]
        assert all(0 <= s < N_SYMBOLS for s in x)
        expected_in, expected_t = _sequence_row(x, task, max_length)
        assert row_in == expected_in
        assert row_t == expected_t
    assert lengths == set(range(1, max_length + 1))  # 64 rows cover the 7 lengths
    assert batch.scored_tokens() == int((batch.targets != IGNORE).sum())
    # every row scores its n + 1 targets
    n_plus_1 = (batch.inputs == SEP).nonzero()[:, 1]  # SEP at index n + 1
    assert batch.scored_tokens() == int(n_plus_1.sum())


def test_reverse_is_copy_reversed_for_the_same_draws():
    copy = sequence_batch("copy", 8, 2, 5, _gen(3))
    rev = sequence_batch("reverse", 8, 2, 5, _gen(3))
    for c, r in zip(copy.inputs.tolist(), rev.inputs.tolist(), strict=True):
        n = c.index(SEP) - 1
        assert r[: n + 2] == c[: n + 2]  # the same draws: same length and x
        assert r[n + 2 : 2 * n + 2] == c[n + 2 : 2 * n + 2][::-1]
        assert c[n + 2 : 2 * n + 2] == c[1 : n + 1]


def test_fixed_length_has_no_padding():
    batch = sequence_batch("copy", 4, 5, 5, _gen())
    assert batch.inputs.shape == (4, 12)
    assert not (batch.inputs == PAD).any()
    assert (batch.targets[:, -1] == EOS).all()


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_sequence_batch_deterministic(task):
    a = sequence_batch(task, 5, 1, 9, _gen(7))
    b = sequence_batch(task, 5, 1, 9, _gen(7))
    c = sequence_batch(task, 5, 1, 9, _gen(8))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("copyy", 2, 1, 3), "task"),
        (("copy", 0, 1, 3), "batch_size"),
        (("copy", 2, 0, 3), "min_length"),
        (("copy", 2, 4, 3), "max_length"),
    ],
)
def test_sequence_batch_bad_arguments(args, name):
    with pytest.raises(ValueError, match=name):
        sequence_batch(*args, _gen())


@pytest.mark.parametrize("value", [1.0, True, "2"])
def test_a_count_that_is_not_an_int_is_a_type_error(value):
    with pytest.raises(TypeError, match="min_length must be an int"):
        sequence_batch("copy", 2, value, 3, _gen())
    with pytest.raises(TypeError, match="n_pairs must be an int"):
        kv_batch(2, value, _gen())


def test_public_names():
    import posenc.arena.data.tasks as tasks

    assert {"KV_MODES", "kv_eval_generator"} <= set(tasks.__all__)
    assert all(hasattr(tasks, name) for name in tasks.__all__)


def test_bad_generator():
    with pytest.raises(ValueError, match="generator"):
        sequence_batch("copy", 2, 1, 3, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="generator"):
        kv_batch(2, 3, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("query_first", [False, True])
def test_kv_batch_format(query_first):
    n = 10
    batch = kv_batch(200, n, _gen(), query_first=query_first)
    length = kv_length(n, query_first)
    assert length == 2 * n + 3 + (2 if query_first else 0)
    assert batch.inputs.shape == batch.targets.shape == (200, length)
    golds = set()
    for row, tgt in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        assert row[0] == KV_BOS
        body = row[3:-2] if query_first else row[1:-2]
        if query_first:
            assert row[1:3] == row[-2:]  # BOS QUERY kq ... QUERY kq
        keys, values = body[0::2], body[1::2]
        assert len(keys) == len(values) == n
        assert len(set(keys)) == n and all(0 <= k < N_KEYS for k in keys)
        assert all(N_KEYS <= v < N_KEYS + N_VALUES for v in values)
        assert row[-2] == QUERY
        gold = keys.index(row[-1])
        golds.add(gold)
        assert tgt == [IGNORE] * (length - 1) + [values[gold]]
    assert golds == set(range(n))  # gold uniform: 200 rows cover all 10 positions
    assert batch.scored_tokens() == 200


def test_kv_hand_example():
    batch = kv_batch(1, 2, _gen(), gold=1, query_first=True)
    (row,) = batch.inputs.tolist()
    k1, v1, k2, v2 = row[3:7]
    assert row == [KV_BOS, QUERY, k2, k1, v1, k2, v2, QUERY, k2]
    assert batch.targets.tolist() == [[IGNORE] * 8 + [v2]]


@pytest.mark.parametrize("gold", [0, 3, 7])
def test_kv_fixed_gold(gold):
    batch = kv_batch(16, 8, _gen(), gold=gold)
    pairs = batch.inputs[:, 1:-2]  # (B, 2 * n_pairs)
    assert torch.equal(batch.inputs[:, -1], pairs[:, 2 * gold])
    assert torch.equal(batch.targets[:, -1], pairs[:, 2 * gold + 1])


def test_kv_deterministic_and_all_keys():
    a = kv_batch(4, N_KEYS, _gen(1))
    b = kv_batch(4, N_KEYS, _gen(1))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    keys = a.inputs[:, 1:-2:2]
    assert torch.equal(keys.sort(dim=1).values, torch.arange(N_KEYS).expand(4, N_KEYS))
    assert not torch.equal(a.inputs, kv_batch(4, N_KEYS, _gen(2)).inputs)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"batch_size": 0, "n_pairs": 3}, "batch_size"),
        ({"batch_size": 2, "n_pairs": 0}, "n_pairs"),
        ({"batch_size": 2, "n_pairs": N_KEYS + 1}, "n_pairs"),
        ({"batch_size": 2, "n_pairs": 3, "gold": 3}, "gold"),
        ({"batch_size": 2, "n_pairs": 3, "gold": -1}, "gold"),
        ({"batch_size": 2, "n_pairs": 3, "query_first": 1}, "query_first"),
        ({"batch_size": 2, "n_pairs": 3, "n_queries": 0}, "n_queries"),
        ({"batch_size": 2, "n_pairs": 3, "n_queries": 4}, "n_queries"),
    ],
)
def test_kv_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        kv_batch(generator=_gen(), **kwargs)


def test_kv_length_bad():
    with pytest.raises(ValueError, match="n_pairs"):
        kv_length(0)


def test_taskbatch_checks():
    x = torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="same shape"):
        TaskBatch(x, torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="targets"):
        TaskBatch(x, x.float())
    assert TaskBatch(x, torch.full((2, 3), IGNORE)).scored_tokens() == 0


@pytest.mark.parametrize("query_first", [False, True])
def test_kv_multi_query_rows(query_first):
    n, m = 6, 4
    batch = kv_batch(50, n, _gen(5), query_first=query_first, n_queries=m)
    length = kv_length(n, query_first, n_queries=m)
    assert length == 2 * n + 3 * m + (2 if query_first else 0)
    assert batch.inputs.shape == batch.targets.shape == (50, length)
    assert batch.scored_tokens() == 50 * m
    for row, tgt in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        start = 3 if query_first else 1
        body = row[start : start + 2 * n]
        pairs = dict(zip(body[0::2], body[1::2], strict=True))
        asks = [*row[start + 2 * n :], None]  # QUERY kq1 vq1 ... QUERY kqm (vqm: target only)
        queried = asks[1::3]
        assert asks[0::3] == [QUERY] * m and len(set(queried)) == m
        assert all(k in pairs for k in queried)  # distinct keys of this row
        assert asks[2::3][:-1] == [pairs[k] for k in queried[:-1]]  # answers shown in order
        if query_first:
            assert row[1:3] == [QUERY, queried[0]]
        # each value is scored where its key is read, nothing else is
        expected = [IGNORE] * length
        for i in range(m):
            expected[start + 2 * n + 3 * i + 1] = pairs[queried[i]]
        assert tgt == expected


def test_kv_multi_query_gold_is_the_first_query():
    batch = kv_batch(20, 5, _gen(), gold=3, n_queries=3)
    pairs = batch.inputs[:, 1:11]
    assert torch.equal(batch.inputs[:, 12], pairs[:, 6])  # the first key asked is pair 3's
    assert torch.equal(batch.targets[:, 12], pairs[:, 7])


def test_kv_one_query_is_the_default():
    a = kv_batch(8, 5, _gen(2), query_first=True)
    b = kv_batch(8, 5, _gen(2), query_first=True, n_queries=1)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


def test_kv_probes_cover_every_case_once_with_the_same_rows_per_seed() -> None:
    from posenc.arena.data.tasks import KV_MODES, kv_probes

    cases = list(kv_probes((3, 5), seed=2))
    keys = [(p.n_pairs, p.mode, p.gold) for p in cases]
    assert keys == [(n, m, g) for n in (3, 5) for m in KV_MODES for g in range(n)]
    first = cases[0]
    record = first.record(encoding="rope")
    assert record == {
        "encoding": "rope",
        "eval_length": kv_length(3, False),
        "metric": "accuracy",
        "mode": "query-last",
        "task": "kv",
        "gold_position": 0,
        "n_pairs": 3,
    }
    again = next(iter(kv_probes((3, 5), seed=2)))
    assert torch.equal(
        kv_batch(4, 3, first.generator, gold=0).inputs,
        kv_batch(4, 3, again.generator, gold=0).inputs,
    )

"""posenc.bench: the suite end to end at its tiny size, the runner's order and statistics,
peers that are missing or failing, the peak-memory probe. No timing is asserted."""

import builtins
import json

import numpy as np
import pytest
import torch

import posenc
from posenc.attn.runners import RUNNERS
from posenc.bench import (
    bias_attention,
    markdown,
    memory,
    patterns,
    peers,
    rolling,
    rope,
    suite,
    targets,
    timing,
    training,
)
from posenc.bench.machine import FIELDS, FLAGS, cpu_info, machine
from posenc.cli import main

STAT_KEYS = {"median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "n", "x_floor", "x_floor_min"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One ``posenc bench --size tiny`` through the command line: (exit code, folder)."""
    out = tmp_path_factory.mktemp("bench")
    return main(["bench", "--size", "tiny", "--out", str(out), "--quiet"]), out


def test_tiny_suite_writes_json_and_markdown(tiny_run):
    code, out = tiny_run
    assert code == 0
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 2, files
    stem = files[0].removesuffix(".json").removesuffix(".md")
    assert files == [f"{stem}.json", f"{stem}.md"]
    result = json.loads((out / f"{stem}.json").read_text())
    assert stem == suite.file_stem(result)
    assert stem.startswith(result["machine"]["date"]) and "-tiny" in stem
    assert result["format"] == suite.FORMAT and result["size"] == "tiny"
    assert set(result["machine"]) == set(FIELDS)
    assert result["machine"]["torch"] == str(torch.__version__)
    assert set(result["machine"]["cpu_flags"]) <= set(FLAGS)
    assert set(result["peers"]) == set(peers.DISTRIBUTIONS)
    assert list(result["cases"]) == list(suite.CASES)
    assert set(result["seconds"]) == set(suite.CASES)
    text = (out / f"{stem}.md").read_text()
    assert result["machine"]["cpu_model"] in text and result["command"] in text
    for title in markdown.CASE_TITLES.values():
        assert f"## {title}" in text


def test_every_record_has_its_floor_and_statistics(tiny_run):
    _, out = tiny_run
    result = json.loads(next(out.glob("*.json")).read_text())
    for case, records in result["cases"].items():
        assert records, case
        for r in records:
            floor = r["results"][r["floor"]]
            assert floor["x_floor"] == floor["x_floor_min"] == 1.0, (case, r["config"])
            for name, s in r["results"].items():
                assert set(s) >= STAT_KEYS, (case, name)
                assert s["min_ms"] <= s["q1_ms"] <= s["median_ms"] <= s["q3_ms"] <= s["max_ms"]
                assert s["x_floor"] == pytest.approx(s["median_ms"] / floor["median_ms"])
                assert s["x_floor_min"] == pytest.approx(s["min_ms"] / floor["min_ms"])
            assert not set(r["results"]) & set(r["skipped"])


def test_each_case_measures_what_it_says(tiny_run):
    _, out = tiny_run
    cases = json.loads(next(out.glob("*.json")).read_text())["cases"]
    grid = {
        (r["config"]["dtype"], r["config"]["layout"], r["config"]["pass"]) for r in cases["rope"]
    }
    assert grid == {
        (d, lay, p)
        for d in ("float32", "bfloat16")
        for lay in ("half", "interleaved")
        for p in ("fwd", "fwd+bwd")
    }
    for r in cases["rope"]:  # every peer is either measured or skipped with a reason
        assert "posenc" in r["results"]
        assert set(peers.ROPE_PEERS) <= set(r["results"]) | set(r["skipped"])
    assert [r["floor"] for r in cases["decode"]] == ["pos 100", "pos 100"]
    assert all("pos 100000" in r["results"] for r in cases["decode"])
    *short, long = cases["bias"]  # the long row: posenc against the floor alone
    bias = {(r["config"]["encoding"], r["config"]["pass"]) for r in short}
    assert bias == {(e, p) for e in ("alibi", "t5") for p in ("fwd", "fwd+bwd")}
    for r in short:
        assert {"floor", "posenc", "sdpa+bias"} <= set(r["results"])
        assert all("peak_mib" in s for s in r["results"].values())
    assert (long["config"]["encoding"], long["config"]["L"], long["config"]["pass"]) == (
        "alibi",
        32,
        "fwd",
    )
    assert set(long["results"]) == {"floor", "posenc"} and "sdpa+bias" in long["skipped"]
    (train,) = cases["training"]
    assert train["floor"] == "nope"
    assert {"rope", "alibi", "t5", "sinusoidal"} <= set(train["results"])
    for s in train["results"].values():
        assert s["tokens_per_s"] == pytest.approx(1 * 8 / (s["median_ms"] / 1e3))


def test_patterns_rows_hold_what_the_tables_read(tiny_run):
    """Every (encoding, length) of the preset, each with the floor, the window (default
    and explicit positions) and the chunk (RoPE also Dual Chunk Attention, which runs its
    own softmax), the runner the chooser picked, peak memory, the
    time per token and the growth over the previous length (None at the first)."""
    _, out = tiny_run
    result = json.loads(next(out.glob("*.json")).read_text())
    preset = suite.PRESETS["tiny"]["patterns"]
    records = result["cases"]["patterns"]
    grid = [(r["config"]["encoding"], r["config"]["L"]) for r in records]
    assert grid == [(e, n) for e in patterns.ENCODINGS for n in preset["lengths"]]
    w, c = preset["window"], preset["chunk"]
    names = {"full", f"window {w}", f"window {w}, positions", f"chunk {c}"}
    first = min(preset["lengths"])
    dca = patterns.dca_encoding(c, preset["head_dim"])[0]
    for r in records:
        rope = r["config"]["encoding"] == "rope"
        assert r["floor"] == patterns.FLOOR
        assert set(r["results"]) == (names | {dca} if rope else names)
        assert (r["config"]["window"], r["config"]["chunk"]) == (w, c)
        for name, s in r["results"].items():
            assert s["runner"] in RUNNERS or (name, s["runner"]) == (dca, "dual_chunk")
            assert s["us_per_token"] == pytest.approx(s["median_ms"] * 1e3 / r["config"]["L"])
            assert "peak_mib" in s and "x_floor_memory" in s
            assert (s["growth"] is None) == (r["config"]["L"] == first)
    by_key = {(r["config"]["encoding"], r["config"]["L"]): r for r in records}
    for (encoding, length), r in by_key.items():
        if length != first:
            prev = by_key[(encoding, length // 2)]["results"]["full"]["median_ms"]
            assert r["results"]["full"]["growth"] == pytest.approx(
                r["results"]["full"]["median_ms"] / prev
            )
    text = (out / f"{suite.file_stem(result)}.md").read_text()
    assert "| encoding | implementation |" in text and "µs/token" in text


def test_rolling_cache_holds_w_minus_1_of_l_keys(tiny_run):
    """The rolling cache holds its last ``W - 1`` keys and values, ``(W - 1) / L`` of the
    full cache's bytes; the windowed step over the full cache holds all of them."""
    _, out = tiny_run
    result = json.loads(next(out.glob("*.json")).read_text())
    preset = suite.PRESETS["tiny"]["rolling"]
    records = result["cases"]["rolling"]
    assert [(r["config"]["encoding"], r["config"]["L"]) for r in records] == [
        (e, n) for e in rolling.ENCODINGS for n in preset["lengths"]
    ]
    w = preset["window"]
    for r in records:
        n, per_token = r["config"]["L"], 2 * preset["kv_heads"] * preset["head_dim"] * 4
        res = r["results"]
        assert r["floor"] == rolling.FLOOR
        assert res["full cache"]["kv_bytes"] == n * per_token
        assert res[f"window {w}, full cache"]["kv_bytes"] == n * per_token
        assert res[f"rolling cache {w}"]["kv_bytes"] == (w - 1) * per_token
        assert res[f"rolling cache {w}"]["x_floor_kv"] == pytest.approx((w - 1) / n)
        for s in res.values():
            assert s["kv_mib"] == s["kv_bytes"] / 2**20
    assert "KV " in (out / f"{suite.file_stem(result)}.md").read_text()


def test_rolling_steps_attend_like_the_full_cache_with_a_window():
    """The three steps of a row decode the same token from caches with the same history:
    the rolling cache's output is the windowed full cache's (the keys it dropped are those
    the window hides), and the full cache's differs (it sees them)."""
    for encoding in rolling.ENCODINGS:
        calls, _ = rolling.impls(encoding, 40, window=8, heads=2, kv_heads=1, head_dim=8)
        outs = {name: [call() for _ in range(3)] for name, call in calls.items()}
        for a, b in zip(outs["window 8, full cache"], outs["rolling cache 8"], strict=True):
            torch.testing.assert_close(a, b)
        assert not torch.allclose(outs["full cache"][0], outs["rolling cache 8"][0])


def test_patterns_refuses_lengths_out_of_order():
    with pytest.raises(ValueError, match="lengths must be increasing and distinct"):
        patterns.run([32, 16], encodings=["nope"], measure_memory=False)


def _fake_clock(durations):
    """A clock and, for each name, a callable that advances it by its next duration."""
    now = [0.0]
    order = []

    def make(name):
        def fn():
            order.append(name)
            now[0] += durations[name].pop(0)

        return fn

    return (lambda: now[0]), {name: make(name) for name in durations}, order


def test_interleaved_runs_round_robin_after_untimed_warmup():
    clock, impls, order = _fake_clock(
        {"a": [100.0, 5.0, 1.0, 3.0, 2.0], "b": [100.0, 1.0, 1.0, 1.0, 9.0], "c": [100.0] * 5}
    )
    stats = timing.interleaved(impls, repeat=4, warmup=1, clock=clock)
    # the warm-up, then rounds in the order turned by the round: each follows each other
    assert "".join(order) == "abc" + "abc" + "bca" + "cab" + "abc"
    a = stats["a"]  # the warm-up's 100 is not counted
    assert (a.n, a.median_s, a.min_s, a.max_s) == (4, 2.5, 1.0, 5.0)
    assert (a.q1_s, a.q3_s) == (1.75, 3.5)
    assert stats["b"].median_s == 1.0 and stats["b"].max_s == 9.0
    record = timing.row({"x": 1}, stats, "b")
    assert record["results"]["a"]["x_floor"] == 2.5 and record["results"]["c"]["x_floor"] == 100
    assert record["results"]["a"]["x_floor_min"] == 1.0  # fastest rounds: 1 and 1


def test_rows_are_timed_a_round_of_every_row_at_a_time():
    """A busy spell that covers the first two calls of row 1 slows one of its rounds, not
    all of them: its fastest round is the undisturbed one."""
    clock, impls, order = _fake_clock(
        {"a": [9.0, 50.0, 1.0, 1.0], "b": [9.0, 50.0, 2.0, 2.0], "c": [9.0, 3.0, 3.0, 3.0]}
    )
    rows = [{"a": impls["a"], "b": impls["b"]}, {"c": impls["c"]}]
    first, second = timing.interleaved_rows(rows, repeat=3, warmup=1, clock=clock)
    # warm-ups (each row's), then rounds across rows, each row's order turned by the round
    assert "".join(order) == "abc" + "abc" + "bac" + "abc"
    assert (first["a"].n, first["a"].min_s, first["a"].max_s) == (3, 1.0, 50.0)
    assert first["b"].min_s == 2.0 and list(second) == ["c"] and second["c"].median_s == 3.0


def test_training_times_every_length_in_the_same_rounds(monkeypatch):
    """The training case hands all its lengths to one interleaved_rows call (a busy spell
    then falls on a round of each length's rows, not on every round of one length), and
    each record keeps its own length, floor and tokens per second."""
    calls = []

    def spy(rows, **kwargs):
        calls.append([sorted(r) for r in rows])
        return timing.interleaved_rows(rows, **kwargs)

    monkeypatch.setattr(training, "interleaved_rows", spy)
    records = training.run(
        [8, 12], ["nope", "alibi"], dim=16, n_layers=1, n_heads=2, batch=1, repeat=2, warmup=0
    )
    assert calls == [[["alibi", "nope"], ["alibi", "nope"]]]
    assert [r["config"]["length"] for r in records] == [8, 12]
    for r, length in zip(records, (8, 12), strict=True):
        assert r["floor"] == "nope" and r["results"]["nope"]["x_floor"] == 1.0
        s = r["results"]["alibi"]
        assert s["tokens_per_s"] == pytest.approx(length / (s["median_ms"] / 1e3))


@pytest.mark.parametrize("bad", [{"repeat": 0}, {"repeat": 1, "warmup": -1}])
def test_interleaved_refuses_bad_counts(bad):
    with pytest.raises(ValueError, match=r"^(repeat|warmup) must be"):
        timing.interleaved({"a": lambda: None}, **{"repeat": 1, **bad})
    with pytest.raises(ValueError, match=r"^(repeat|warmup) must be"):
        timing.interleaved_rows([{"a": lambda: None}], **{"repeat": 1, **bad})


@pytest.mark.parametrize("rows", [[], [{"a": lambda: None}, {}]])
def test_interleaved_rows_refuses_an_empty_row(rows):
    with pytest.raises(ValueError, match="at least one implementation, in every row"):
        timing.interleaved_rows(rows, repeat=1)


def test_summary_quartiles_agree_with_numpy():
    gen = np.random.default_rng(0)
    for n in (1, 2, 5, 8):
        values = list(gen.random(n))
        stats = timing.summarise(values)
        assert stats.q1_s == pytest.approx(np.quantile(values, 0.25))
        assert stats.q3_s == pytest.approx(np.quantile(values, 0.75))
        assert stats.median_s == pytest.approx(np.quantile(values, 0.5))
        assert (stats.min_s, stats.max_s) == (min(values), max(values))


def _refuse(monkeypatch, *modules):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.split(".")[0] in modules:
            raise ImportError(f"No module named {name.split('.')[0]!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_missing_and_failing_peers_are_recorded_not_raised(monkeypatch):
    _refuse(monkeypatch, "transformers", "x_transformers")

    def broken(**config):
        raise RuntimeError("boom")

    monkeypatch.setitem(peers.ROPE_PEERS, "broken", broken)
    r = rope.run_one(8, 4, "float32", "half", "fwd", 1, 1, repeat=1, warmup=0)
    assert set(r["results"]) == {"floor", "posenc"}
    assert r["skipped"]["transformers"].startswith("not installed: No module named")
    assert r["skipped"]["broken"] == "failed: RuntimeError: boom"
    assert r["skipped"]["rotary-embedding-torch"].startswith("unsupported:")
    calls, skipped = bias_attention.impls("alibi", 8, heads=2, head_dim=4)
    assert set(calls) == {"floor", "posenc", "sdpa+bias"}
    assert {"transformers (BLOOM)", "x-transformers"} <= set(skipped)
    assert skipped["x-transformers"].startswith("not installed")
    text = markdown.table([r])
    assert "| — |" in text and "broken" in text.splitlines()[0]


@pytest.mark.parametrize(
    ("peer", "layout"),
    [
        ("transformers", "half"),
        ("x-transformers", "interleaved"),
        ("rotary-embedding-torch", "interleaved"),
    ],
)
def test_rope_peers_compute_what_posenc_computes(peer, layout, tol):
    """The adapters do the same work: the same rotation, up to the rounding of their
    float32 angles (a few roundings of angles up to seq, times |x|, two terms)."""
    pytest.importorskip(peer.replace("-", "_"))
    seq, hd = 16, 8
    q, k = torch.randn(2, 1, 2, seq, hd).unbind(0)
    ours = rope.posenc_rope(seq, hd, layout)(q, k)
    theirs = peers.ROPE_PEERS[peer](seq=seq, head_dim=hd, layout=layout, dtype=torch.float32)(q, k)
    scale = seq * float(torch.maximum(q.abs().max(), k.abs().max()))
    for a, b in zip(theirs, ours, strict=True):
        torch.testing.assert_close(a, b, **tol(n=8, scale=scale))


@pytest.mark.parametrize(
    ("peer", "encoding", "module"),
    [
        ("transformers (BLOOM)", "alibi", "transformers"),
        ("x-transformers", "alibi", "x_transformers"),
    ],
)
def test_alibi_peers_attend_like_posenc(peer, encoding, module):
    """BLOOM adds slope·key position (softmax ignores the per-query shift), x-transformers
    -slope·|distance|: both the ALiBi of posenc. Softmax weights are off by a few float32
    roundings of scores up to slope·L, and the outputs average values of |v| < 5."""
    pytest.importorskip(module)
    q, k, v = torch.randn(3, 1, 8, 32, 16).unbind(0)
    enc = posenc.create("alibi", n_heads=8)
    ours = posenc.attention(q, k, v, encoding=enc, backend="sdpa")
    theirs = peers.BIAS_PEERS[peer](encoding=encoding, heads=8)(q, k, v)
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not memory.available(), reason="needs /proc/self/clear_refs (Linux)")
def test_peak_memory_sees_a_large_buffer_and_not_a_small_one():
    big = memory.peak_extra_mib(lambda: torch.ones(16 * 2**20).sum())  # 64 MiB, touched
    assert big >= 60
    assert memory.peak_extra_mib(lambda: torch.ones(16).sum()) < 16


def test_a_crashed_memory_child_is_an_error_record():
    (result,) = memory.in_subprocess("posenc.no_such_module_here", [{}])
    assert result["error"].startswith("exit code 1")


def test_cpu_info_reads_x86_and_arm_flags():
    model, flags = cpu_info("model name\t: X\nflags\t\t: sse avx512f amx_tile avx2\n")
    assert (model, flags) == ("X", ["avx2", "avx512f", "amx_tile"])
    assert cpu_info("Features\t: fp asimd sve\n")[1] == ["asimd", "sve"]


def test_cpu_caches_read_sysfs_and_the_report_names_them(tmp_path):
    """A Sapphire-Rapids-like core (48K L1d, 2M L2, 105M L3) as sysfs lays it out; an entry
    that cannot be read, or of an unknown type, is skipped; no folder: no caches."""
    from posenc.bench.markdown import _machine
    from posenc.system import cpu_caches

    entries = [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
               (3, "Unified", "107520K"), (4, "Trace", "1K")]  # fmt: skip
    for i, (level, kind, size) in enumerate(entries):
        (tmp_path / f"index{i}").mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (tmp_path / f"index{i}" / name).write_text(f"{value}\n")
    (tmp_path / "index9").mkdir()  # no files in it
    caches = cpu_caches(tmp_path)
    assert caches == {"L1d": 48 << 10, "L1i": 32 << 10, "L2": 2 << 20, "L3": 105 << 20}
    assert cpu_caches(tmp_path / "missing") == {}
    record = machine() | {"cpu_caches": caches, "cores": 2}
    assert "2 cores (L1d 48 KiB, L1i 32 KiB, L2 2 MiB, L3 105 MiB)" in _machine(record)


def test_the_report_names_what_was_calibrated():
    """A result records the choices measured on the machine (posenc.calibration) and its
    report says them; the suite runs with calibration off (tests/conftest.py): none."""
    from posenc.bench.markdown import _calibration

    result = suite.run(size="tiny", cases=["rope"], repeat=1)
    assert result["calibration"] == {}
    line = _calibration({"distance_block/L1024/d64/float32": 256})
    assert line == [
        "Calibrated on this machine (posenc.calibration): distance_block/L1024/d64/float32 = 256.",
        "",
    ]


def test_suite_refuses_unknown_sizes_and_cases():
    with pytest.raises(ValueError, match="size must be one of"):
        suite.run(size="huge")
    with pytest.raises(ValueError, match="cases must be some of"):
        suite.run(size="tiny", cases=["rope", "nothing"])


def test_markdown_states_constant_keys_once_and_marks_skips():
    a = timing.row({"L": 8, "enc": "a"}, {"floor": timing.summarise([0.001])}, "floor")
    b = timing.row(
        {"L": 8, "enc": "b"},
        {"floor": timing.summarise([0.001]), "x": timing.summarise([0.004])},
        "floor",
        {"y": "unsupported: no"},
    )
    lines = markdown.table([a, b]).splitlines()
    assert lines[0] == "All rows: L 8."
    assert lines[2] == "| enc | floor | x | y |"
    assert lines[4:] == ["| a | 1.00 ms | — | — |", "| b | 1.00 ms | 4.00 ms (4.00x) | — |"]


def _rows(case, config, ratios):
    """One record of ``case`` with a floor of 1 s and each ``name -> ratio``."""
    floor = "nope" if case == "training" else "floor"
    stats = {floor: timing.summarise([1.0])}
    stats |= {name: timing.summarise([ratio]) for name, ratio in ratios.items()}
    return timing.row(config, stats, floor)


def test_targets_are_read_on_the_rows_they_name():
    alibi = _rows("bias", {"encoding": "alibi", "L": 1024, "pass": "fwd+bwd"}, {"posenc": 1.6})
    fire = _rows("bias", {"encoding": "fire", "L": 1024, "pass": "fwd"}, {})  # posenc missing
    step = _rows("training", {"length": 512}, {"alibi": 1.15, "t5": 3.0})
    bias = targets.verdicts("bias", [alibi, fire])
    assert [(v.target.bound, v.ratio, v.met) for v in bias] == [
        (1.5, 1.6, False),
        (2.0, None, False),
    ]
    assert bias[1].line() == "fire fwd, L 1024: not run, target at most 2.00x: not met"
    (train,) = targets.verdicts("training", [step])  # alibi's row only: t5 has no target
    assert train.line() == (
        "alibi training step, length 512: 1.15x (median 1.15x), target at most 1.20x: met"
    )
    assert targets.verdicts("rope", [alibi]) == []  # another case's targets do not apply


def test_a_target_reads_the_fastest_rounds_and_shows_the_medians():
    """Interference only adds time: a row whose median round was slowed meets its target
    on its fastest round, and the line shows both ratios."""
    stats = {
        "floor": timing.summarise([1.0, 1.0, 1.1]),
        "posenc": timing.summarise([1.2, 1.6, 1.7]),
    }
    config = {"encoding": "t5", "L": 1024, "pass": "fwd"}
    (v,) = targets.verdicts("bias", [timing.row(config, stats, "floor")])
    assert v.ratio == pytest.approx(1.2) and v.median == pytest.approx(1.6) and v.met
    assert v.line() == "t5 fwd, L 1024: 1.20x (median 1.60x), target at most 1.50x: met"
    old = {"config": config, "results": {"posenc": {"x_floor": 1.6}}}  # a result from before
    (v,) = targets.verdicts("bias", [old])
    assert v.ratio == v.median == 1.6 and not v.met


def test_the_report_states_the_targets_and_the_isas_side_by_side():
    step = _rows("training", {"length": 512}, {"alibi": 1.3})
    result = {
        "size": "small",
        "command": "posenc bench",
        "machine": machine(),
        "peers": {},
        "cases": {"training": [step]},
    }
    text = markdown.report(result)
    assert (
        "- alibi training step, length 512: 1.30x (median 1.30x), target at most 1.20x: not met"
    ) in text
    faster = {**result, "cases": {"training": [_rows("training", {"length": 512}, {"alibi": 1.1})]}}
    lines = markdown.side_by_side({"native": result, "default": faster}).splitlines()
    capability = result["machine"]["cpu_capability"]
    assert lines[0] == f"| row | target | native ({capability}) | default ({capability}) |"
    assert lines[2] == (
        "| alibi training step, length 512 | at most 1.20x "
        "| 1.30x (median 1.30x), not met | 1.10x (median 1.10x), met |"
    )


def test_every_bias_encoding_the_suite_lists_runs_each_of_its_calls():
    # the small and full sizes time every one of them (none is named in their presets)
    names = bias_attention.bias_encodings()
    assert {"alibi", "t5", "kerple", "shaw", "fire"} <= set(names)
    # their attention needs the input or the scores, or replaces the softmax
    assert not {"fox", "cope", "path", "stick_breaking"} & set(names)
    for name in names:
        for pass_ in bias_attention.PASSES:
            calls, _ = bias_attention.impls(name, 8, heads=2, head_dim=4, pass_=pass_, peers=False)
            for call in calls.values():
                call()


def test_compiled_case_decodes_with_two_graphs_and_trains_compiled(tiny_run):
    """The decode row: eager (the floor), eager over a static cache and compiled over it;
    the compiled step made two graphs over the whole run (the prompt and the step). The
    training rows: eager against compiled, per kind."""
    from posenc.cli.bench import CASES

    assert CASES == suite.CASES
    _, out = tiny_run
    decode, *train = json.loads(next(out.glob("*.json")).read_text())["cases"]["compiled"]
    assert decode["floor"] == "eager" and decode["config"]["graphs"] == 2
    assert set(decode["results"]) == {"eager", "eager static", "compiled static"}
    kinds = suite.PRESETS["tiny"]["compiled"]["kinds"]
    assert [r["config"]["step"] for r in train] == [f"train {k}" for k in kinds]
    assert all(set(r["results"]) == {"eager", "compiled"} for r in train)


def test_rerotate_case_shifts_the_keys_both_ways(tiny_run):
    """One row per length: recomputing the keys (the floor) and re-rotating them in place,
    which give the same keys (float32 roundings of keys of size about 4)."""
    _, out = tiny_run
    rows = json.loads(next(out.glob("*.json")).read_text())["cases"]["rerotate"]
    assert [r["config"]["L"] for r in rows] == suite.PRESETS["tiny"]["rerotate"]["lengths"]
    for r in rows:
        assert set(r["results"]) == {"recompute", "rerotate"} and r["floor"] == "recompute"
        assert r["max_abs_diff"] < 1e-5

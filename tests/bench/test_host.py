"""posenc.bench.host: the host-time case at its tiny size, end to end (JSON and Markdown with
the ratios to the peer and the targets), its peers doing posenc's work, and a missing peer
recorded rather than raised. No timing is asserted."""

import builtins
import json

import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.bench import host, markdown, peers, suite, targets, timing
from posenc.bench.machine import machine

TINY = suite.PRESETS["tiny"]["host"]
CALLS = [
    ("enc(q, k)", "rope"),
    ("attention", "none"),
    *[("attention, bias", name) for name in TINY["encodings"]],
    *[(call, kind) for kind in TINY["kinds"] for call in ("forward, 1 token", "decode step")],
]
BOUNDS = {"enc(q, k)": 0.5, "attention": 10.0, "attention, bias": 25.0}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One tiny run of the case alone, written: (result, JSON text, Markdown text)."""
    out = tmp_path_factory.mktemp("host")
    threads = torch.get_num_threads()
    result = suite.run(size="tiny", cases=["host"])
    assert torch.get_num_threads() == threads  # the case's one thread is given back
    path = suite.write(result, out)
    return result, path.read_text(), path.with_suffix(".md").read_text()


def test_every_row_against_its_peer_in_json(written):
    _, text, _ = written
    records = json.loads(text)["cases"]["host"]
    assert [(r["config"]["call"], r["config"]["encoding"]) for r in records] == CALLS
    for r in records:
        assert r["floor"] == host.FLOOR and r["config"]["threads"] == 1
        model = r["config"]["call"] in ("forward, 1 token", "decode step")
        assert r["config"]["calls per round"] == (1 if model else TINY["calls"])
        assert list(r["results"]) == [host.FLOOR, "posenc", host.OFF], r["config"]
        peer = r["results"][host.FLOOR]
        for name in ("posenc", host.OFF):
            s = r["results"][name]
            assert s["n"] == TINY["repeat"]
            assert s["x_floor"] == pytest.approx(s["median_ms"] / peer["median_ms"])
            assert s["x_floor_min"] == pytest.approx(s["min_ms"] / peer["min_ms"])


def test_markdown_has_the_ratios_and_a_target_per_row(written):
    result, _, text = written
    assert f"## {markdown.CASE_TITLES['host']}" in text
    header = next(line for line in text.splitlines() if line.startswith("| call |"))
    assert header.endswith(f"| {host.FLOOR} | posenc | {host.OFF} |")
    read = targets.verdicts("host", result["cases"]["host"])
    assert [(v.config["call"], v.config["encoding"]) for v in read] == CALLS
    for v in read:
        assert v.target.bound == BOUNDS.get(v.config["call"], 0.7)
        ratio = result["cases"]["host"][read.index(v)]["results"]["posenc"]["x_floor_min"]
        assert v.ratio == ratio and v.met == (ratio <= v.target.bound)
        assert f"- {v.line()}" in text
        assert v.line().startswith(f"{v.config['call']}, {v.config['encoding']}: ")
        assert v.line().endswith(f"target at most {v.target.bound:.2f}x: {v.status()}")


def test_a_round_makes_its_calls_back_to_back_and_reports_per_call():
    made = []
    assert host._repeated(lambda: made.append(1) or len(made), 3)() == 3 and made == [1] * 3
    stats = {host.FLOOR: timing.summarise([2.0, 4.0]), "posenc": timing.summarise([6.0, 8.0])}
    record = host._per_call(timing.row({"calls per round": 2}, stats, host.FLOOR))
    peer, ours = record["results"][host.FLOOR], record["results"]["posenc"]
    assert (peer["min_ms"], peer["median_ms"], peer["max_ms"]) == (1e3, 1.5e3, 2e3)
    assert (ours["min_ms"], ours["median_ms"], ours["x_floor"], ours["x_floor_min"]) == (
        3e3,
        3.5e3,
        7 / 3,
        3.0,
    )


def _refuse(monkeypatch, module):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.split(".")[0] == module:
            raise ImportError(f"No module named {module!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_a_missing_peer_is_reported_not_raised(monkeypatch):
    """Without transformers the RoPE and model rows time posenc alone and say why; the
    attention rows keep their SDPA peer; their targets read 'not run'."""
    _refuse(monkeypatch, "transformers")
    records = host.run(**{**TINY, "repeat": 1, "warmup": 0})
    for r in records:
        if r["config"]["call"].startswith("attention"):
            assert not r["skipped"] and host.FLOOR in r["results"]
            continue
        assert r["skipped"][host.FLOOR].startswith("not installed: No module named")
        assert list(r["results"]) == ["posenc", host.OFF]
        assert r["results"]["posenc"]["x_floor"] is None
    missing = [v for v in targets.verdicts("host", records) if v.ratio is None]
    assert len(missing) == 1 + 2 * len(TINY["kinds"])
    assert all(v.line().endswith(": not met") and "not run" in v.line() for v in missing)
    result = {"size": "tiny", "command": "x", "machine": machine(), "peers": {}}
    text = markdown.report({**result, "cases": {"host": records}})
    assert "- peer: not installed: No module named 'transformers'" in text


def test_the_peers_do_posencs_work():
    """transformers' rotation (over 16 positions, where it is not the identity) is posenc's
    RoPE up to float32 angles; a bare causal SDPA call is plain posenc.attention."""
    pytest.importorskip("transformers")
    q, k, v = torch.randn(3, 1, 2, 16, 64).unbind(0)
    theirs = peers.transformers_rotary_call(seq=16, head_dim=64)(q, k)
    ours = posenc.create("rope", head_dim=64)(q, k)
    for a, b in zip(theirs, ours, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(posenc.attention(q, k, v), plain)


def test_the_llama_peer_decodes_one_token_a_call():
    """The Llama peer has the widths asked for and its cache grows by one token a step."""
    pytest.importorskip("transformers")
    model, new_cache, kwarg = peers.hf_llama(
        vocab_size=32, dim=16, n_layers=2, n_heads=2, mlp_ratio=4
    )
    c = model.config
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (16, 64, 2)
    assert (c.num_attention_heads, c.num_key_value_heads, c.vocab_size) == (2, 2, 32)
    cache = new_cache()
    with torch.no_grad():
        for length in (3, 4, 5):
            ids = torch.zeros(1, 3 if length == 3 else 1, dtype=torch.long)
            logits = model(input_ids=ids, use_cache=True, **{kwarg: cache}).logits
            assert logits.shape[-1] == 32 and cache.get_seq_length() == length

"""llama.cpp against posenc: the GGUF metadata its converter writes, turned into rotations
by llama.cpp's rules (:mod:`posenc.engines.gguf_rope`), and llama.cpp itself.

``make test`` replays the metadata llama.cpp's converter wrote for the configs of
``tests/engines/configs.py`` and for every model type the HF tests build
(``tests/engines/data/gguf.json``, recorded by ``make test-engines`` from the llama.cpp
that llama-cpp-python 0.3.36 vendors) through the comparison, and checks the rules on
metadata written by hand. The tests marked ``engines`` run the converter live (its answers
must equal the recording), and run llama.cpp itself through llama-cpp-python
(``POSENC_LLAMA_PYTHON``): tiny random models, converted by its converter, give the
logits transformers gives where posenc's rules say the rotations agree; and, everywhere,
the logits of transformers with its rotary embedding replaced by the rules' tables, so
the rules are llama.cpp's.

Tolerance of the logits: float32 end to end (the KV cache too) agrees to about 1e-6 of
the largest logit (measured: 6e-7 of 0.65); ``1e-4`` of it is the bound. Gemma's GELU is
read by ggml's CPU backend from a float16 table (``GGML_GELU_FP16``: ``2^-11`` relative
per activation; measured 5e-4 of the largest logit over 6 layers): ``4e-3`` of it. A
rotation that differs (the scaling left out) moves the logits by ten times the bound or
more (measured: 0.55 of 0.65, 0.37 of 3.8 for Gemma); each test checks that its model is
that sensitive.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.engines.configs import NAMED
from tests.engines.tiny import RUNS, build, logits, script, with_rules_tables

from posenc.engines import conform
from posenc.engines.gguf_rope import gguf_rope, rope_cache
from posenc.engines.llama_engine import LLAMA_CPP, gguf_metadata, metadata_tables

HERE = Path(__file__).parent
RECORDED = json.loads((HERE / "data" / "gguf.json").read_text())
LLAMA_PYTHON = "POSENC_LLAMA_PYTHON"


def replay(meta):
    return lambda config, jobs: metadata_tables(meta, jobs)


# --- make test: the recorded converter's metadata through llama.cpp's rules ----------------


def expect_named(name, rows):
    """What llama.cpp does with the named configs: as posenc reads them, to float32, but
    Phi-3's short prompts (the long factors, chosen by the context), Qwen2.5-1M's dual
    chunks (not converted: plain RoPE), gpt-oss's unrounded YaRN (rounded) and a stated
    YaRN attention factor (not read: ``0.1·ln(4) + 1``)."""
    for r in rows:
        if name == "gpt-oss":
            assert (r.first_position, r.differs_on) == (1, "frequencies of pairs 9-17"), r
        elif name == "qwen2-yarn-attention-factor":
            assert r.first_position == 0, r
            assert r.differs_on == "attention factor (the engine's 1.13863, posenc's 1)"
        elif name == "qwen2.5-1m":
            assert r.differs_on.startswith("dual_chunk_attention_config"), r
        elif name == "phi3-longrope" and r.length == 4096:
            assert r.first_position == 1, r
            assert r.differs_on == "longrope: fixed at a 131072-token sequence, at every length"
        else:
            assert r.first_position is None, r
            assert 0 < r.max_error < 0.02 and ", up to " in r.ran, r


@pytest.mark.parametrize("name", sorted(NAMED))
def test_recorded_metadata_compares_as_published(name):
    rows = conform(NAMED[name](), engines={"llama.cpp": replay(RECORDED["configs"][name])})
    assert rows and {r.engine for r in rows} == {"llama.cpp"}
    expect_named(name, rows)


#: the HF-test model types llama.cpp's converter does not convert as transformers saves them
NOT_CONVERTED = {
    "cohere2": "KeyError: 'rotary_pct'",  # transformers 5 saves no rotary_pct
    "gpt_neox": "KeyError: 'rotary_pct'",  # transformers 5 saves partial_rotary_factor
    "cwm": "not supported",
    "kolibri1": "not supported",
    "ministral": "not supported",
}


def test_recorded_metadata_of_every_hf_test_model_type_agrees():
    from tests.hf.families import CONFIGS, make

    assert set(RECORDED["families"]) == set(CONFIGS)
    for name in sorted(CONFIGS):
        rows = conform(make(name), engines={"llama.cpp": replay(RECORDED["families"][name])})
        for r in rows:
            if name in NOT_CONVERTED:
                assert r.ran.startswith("not run: llama.cpp's converter") and (
                    NOT_CONVERTED[name] in r.ran
                ), r
            else:
                assert r.first_position is None, (name, r)


def test_the_recording_says_what_made_it():
    assert RECORDED["versions"] == {"llama-cpp-python": "0.3.36"}


# --- the rules on metadata written by hand --------------------------------------------------


def meta(arch="llama", **keys):
    kv = {"general.architecture": arch, f"{arch}.context_length": 8192,
          f"{arch}.embedding_length": 128, f"{arch}.attention.head_count": 2}  # fmt: skip
    kv.update({f"{arch}.{k.replace('__', '.')}": v for k, v in keys.items()})
    return kv


def angles64(positions, n_rot, base):
    inv = base ** (-torch.arange(0, n_rot, 2, dtype=torch.float64) / n_rot)
    return positions.double()[:, None] * inv


def test_unscaled_rotation_is_rope_to_float32():
    positions = torch.tensor([0, 1, 7, 100, 4095])
    rope = gguf_rope(meta(rope__freq_base=10000.0), {}, None, 8192)
    assert rope.n_rot == 64 and rope.freq_scale == 1 and rope.ext_factor == 0
    cos, sin = rope_cache(rope, positions)
    ref = angles64(positions, 64, 10000.0)
    # float32 angles: a running product of θ over 32 pairs, then cos and sin
    bound = (ref.abs() * 64 * 2.0**-24 + 4 * 2.0**-24).max()
    assert (cos.double() - ref.cos()).abs().max() <= bound
    assert (sin.double() - ref.sin()).abs().max() <= bound


def test_yarn_attention_factor_is_mscale_and_the_yarn_attn_factor_key_is_not_read():
    """llama.cpp sets ``0.1·ln(s) + 1`` whatever ``rope.scaling.yarn_attn_factor`` says."""
    keys = dict(rope__scaling__type="yarn", rope__scaling__factor=4.0,
                rope__scaling__original_context_length=2048)  # fmt: skip
    plain = gguf_rope(meta(**keys), {}, None, 8192)
    told = gguf_rope(meta(**keys, rope__scaling__yarn_attn_factor=1.0), {}, None, 8192)
    assert plain == told and plain.ext_factor == 1
    cos, sin = rope_cache(plain, torch.tensor([5]))
    magnitude = torch.sqrt(cos.double() ** 2 + sin.double() ** 2)
    torch.testing.assert_close(magnitude, torch.full_like(magnitude, 0.1 * np.log(4) + 1),
                               rtol=1e-6, atol=0)  # fmt: skip


def test_deepseeks_log_multiplier_divides_out_of_the_table():
    """DeepSeek-V3 (``mscale = mscale_all_dim = 1``): the tables carry a factor 1, as
    transformers' do (the softmax scale carries ``mscale²``)."""
    keys = dict(rope__scaling__type="yarn", rope__scaling__factor=40.0,
                rope__scaling__original_context_length=4096,
                rope__scaling__yarn_log_multiplier=0.1, rope__dimension_count=64)  # fmt: skip
    rope = gguf_rope(meta("deepseek2", **keys), {}, None, 8192)
    cos, sin = rope_cache(rope, torch.tensor([3]))
    assert torch.sqrt(cos.double() ** 2 + sin.double() ** 2).sub(1).abs().max() < 1e-6


def test_sliding_layers_take_their_base_and_no_scaling_unless_the_arch_says():
    keys = dict(rope__freq_base=1e6, rope__freq_base_swa=1e4, rope__scaling__type="linear",
                rope__scaling__factor=8.0)  # fmt: skip
    gemma = gguf_rope(meta("gemma3", **keys), {}, "sliding_attention", 8192)
    assert (gemma.freq_base, gemma.freq_scale) == (1e4, 1.0)
    full = gguf_rope(meta("gemma3", **keys), {}, "full_attention", 8192)
    assert (full.freq_base, full.freq_scale) == (1e6, 0.125)
    cohere = gguf_rope(meta("cohere2", rope__freq_base=5e4), {}, "sliding_attention", 8192)
    assert cohere.freq_base == 5e4


def test_longrope_factors_are_chosen_by_the_context_not_the_sequence():
    tensors = {"rope_factors_long.weight": [2.0] * 32, "rope_factors_short.weight": [1.0] * 32}
    keys = meta(rope__scaling__original_context_length=4096)
    assert gguf_rope(keys, tensors, None, 8192).freq_factors == (2.0,) * 32
    assert gguf_rope(keys, tensors, None, 4096).freq_factors == (1.0,) * 32


def test_an_unknown_scaling_type_and_a_width_mismatch_are_rows():
    assert "knows no rope scaling type" in _answer(meta(rope__scaling__type="su"))
    assert "rotates 16 pairs, posenc 32" in _answer(meta(rope__dimension_count=32))
    assert _answer({}, error="Architecture 'X' not supported!") == (
        "not run: Architecture 'X' not supported!"
    )
    no_context = {k: v for k, v in meta().items() if k != "llama.context_length"}
    assert _answer(no_context) == "not run: the metadata has no llama.context_length"


def _answer(kv, error=None):
    from posenc import create

    job = (create("rope", head_dim=64), torch.tensor([0, 1]), None)
    record = {"error": error} if error else {"arch": kv["general.architecture"], "kv": kv,
                                             "tensors": {}}  # fmt: skip
    (answer,) = metadata_tables(record, [job])
    return answer


def test_without_llama_cpp_the_row_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv(LLAMA_CPP, raising=False)
    rows = [r for r in conform(NAMED["llama3.1"]()) if r.engine == "llama.cpp"]
    assert rows[0].ran.startswith(f"not run: set {LLAMA_CPP}")


# --- live: the converter, and llama.cpp itself -----------------------------------------------

live = pytest.mark.skipif(not os.environ.get(LLAMA_CPP), reason=f"needs {LLAMA_CPP}")


@pytest.mark.engines
@live
def test_live_converter_writes_what_was_recorded():
    for name, make in NAMED.items():
        assert gguf_metadata(make()) == RECORDED["configs"][name], name


#: whether transformers' logits are llama.cpp's, by the comparison of the rotations (not:
#: llama.cpp drops a stated YaRN attention factor and gpt-oss's ``truncate: false``, and
#: takes LongRoPE's long factors for a short prompt in a longer context)
LLAMA_AGREES = {
    "llama3": True,
    "qwen2-yarn": True,
    "qwen2-yarn-attention-factor": False,
    "phi3-longrope": True,
    "phi3-longrope-short": False,
    "gemma3": True,
    "deepseek-v3-yarn": True,
    "gpt-oss-yarn": False,
}


#: models whose GELU ggml's CPU backend reads from a float16 table (GGML_GELU_FP16)
GELU_FP16 = {"gemma3"}


def _llama_python():
    python = os.environ.get(LLAMA_PYTHON)
    if not python or not os.environ.get(LLAMA_CPP):
        pytest.skip(f"needs {LLAMA_PYTHON} and {LLAMA_CPP}")
    return python


def llama_cpp_logits(model, tokens, n_ctx, folder):
    """llama.cpp's logits of ``model``: saved, converted by its converter, run by it."""
    model.save_pretrained(folder / "hf")
    request = {"model": str(folder / "hf"), "llama_cpp": os.environ[LLAMA_CPP],
               "out": str(folder / "tiny.gguf")}  # fmt: skip
    script(sys.executable, "tiny_gguf.py", request)
    request = {"gguf": str(folder / "tiny.gguf"), "tokens": tokens, "n_ctx": n_ctx,
               "out": str(folder / "logits.npy")}  # fmt: skip
    script(_llama_python(), "llama_logits.py", request)
    return torch.from_numpy(np.load(folder / "logits.npy"))


@pytest.mark.engines
@pytest.mark.parametrize("run", sorted(LLAMA_AGREES))
def test_llama_cpp_logits(run, tmp_path):
    _llama_python()
    model, tokens = build(run)
    n_ctx = RUNS[run][2]
    got = llama_cpp_logits(model, tokens, n_ctx, tmp_path)
    ref = logits(model, tokens)
    tol = (4e-3 if run in GELU_FP16 else 1e-4) * float(ref.abs().max())
    unscaled = logits(with_rules_tables(copy.deepcopy(model), n_ctx, unscaled=True), tokens)
    assert float((got - unscaled).abs().max()) > 10 * tol  # the scaling shows
    rules = logits(with_rules_tables(model, n_ctx), tokens)
    assert float((got - rules).abs().max()) <= tol  # the rules are llama.cpp's
    if LLAMA_AGREES[run]:
        assert float((got - ref).abs().max()) <= tol
    else:
        assert float((got - ref).abs().max()) > 10 * tol


# --- a GGUF file's own metadata (posenc conform --gguf) --------------------------------------


def write_gguf(path, found, drop=()):
    """A GGUF file of metadata ``found`` (a recorded answer), without the keys and tensors
    in ``drop``, as llama.cpp's own package writes one (no weights)."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(path, found["arch"])
    kinds = {bool: gguf.GGUFValueType.BOOL, int: gguf.GGUFValueType.UINT32,
             float: gguf.GGUFValueType.FLOAT32, str: gguf.GGUFValueType.STRING}  # fmt: skip
    for key, value in found["kv"].items():
        if key != "general.architecture" and key not in drop and not isinstance(value, list):
            writer.add_key_value(key, value, kinds[type(value)])
    for name, values in found["tensors"].items():
        if name not in drop:
            writer.add_tensor(name, np.asarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_files_metadata_reads_back_as_the_converter_wrote_it(tmp_path):
    from posenc.engines.llama_engine import read_gguf

    found = RECORDED["configs"]["llama3.1"]
    read = read_gguf(write_gguf(tmp_path / "m.gguf", found))
    scalars = {k: v for k, v in found["kv"].items() if not isinstance(v, list)}
    assert {k: read["kv"][k] for k in scalars} == pytest.approx(scalars)
    assert read["tensors"] == found["tensors"]  # float32 both ways


def test_conform_gguf_finds_a_file_that_lost_llama3s_scaling(tmp_path, capsys, monkeypatch):
    """A Llama 3.1 GGUF without ``rope_freqs`` (a converter that dropped the scaling,
    as in unsloth#6197) rotates the low frequencies 8 times too fast."""
    from posenc.cli import main

    monkeypatch.setenv("COLUMNS", "1000")  # one row per line: the table's columns read here

    config = tmp_path / "hf"
    NAMED["llama3.1"]().save_pretrained(config)
    good = write_gguf(tmp_path / "good.gguf", RECORDED["configs"]["llama3.1"])
    bad = write_gguf(tmp_path / "bad.gguf", RECORDED["configs"]["llama3.1"],
                     drop={"rope_freqs.weight"})  # fmt: skip
    for file, agrees in ((good, True), (bad, False)):
        assert main(["conform", str(config), "--gguf", str(file)]) == 0
        (row,) = [line for line in capsys.readouterr().out.splitlines() if "llama.cpp" in line]
        cells = re.split(r"\s{2,}", row.strip())  # the table's columns
        assert cells[3].startswith("llama: base 500000")
        # the pairs Llama 3 slows down (wavelengths past 8192 / low_freq_factor), from 1 on
        assert cells[-2:] == (["-", "-"] if agrees else ["1", "frequencies of pairs 8-15"])


def test_conform_gguf_refuses_what_is_no_gguf_file_in_one_line(tmp_path, capsys):
    from posenc.cli import main

    config = tmp_path / "hf"
    NAMED["llama3.1"]().save_pretrained(config)
    (tmp_path / "x.gguf").write_text("not gguf")
    for file, says in ((tmp_path / "none.gguf", "is no file"), (tmp_path / "x.gguf", "no GGUF")):
        assert main(["conform", str(config), "--gguf", str(file)]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, err

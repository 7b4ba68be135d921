"""lost-in-the-middle end to end on the tiny preset, and the Hugging Face probe on a tiny
random Llama built offline (no downloads)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.arena.data.tasks import kv_batch, kv_length
from posenc.arena.experiments import lost_in_the_middle as litm
from posenc.arena.measuring import hf_probe
from posenc.arena.measuring.evaluate import task_accuracy
from posenc.arena.running.context import RunContext
from posenc.arena.running.presets import QUICK, TINY

ENCODINGS = list(TINY.encodings or ())


def _check_grid(records: list[dict[str, Any]], encodings: list[str], train_length: int) -> None:
    """Every gold position once per (encoding, n, mode), with the keys the results expect."""
    grid = [(e, n, m, g) for e in encodings for n in TINY.kv_test_pairs for m in litm.MODES
            for g in range(n)]  # fmt: skip
    got = [(r["encoding"], r["n_pairs"], r["mode"], r["gold_position"]) for r in records]
    assert sorted(got) == sorted(grid)
    for r in records:
        qf = r["mode"] == "query-first"
        assert r["experiment"] == "lost-in-the-middle" and r["metric"] == "accuracy"
        assert r["task"] == "kv" and r["seed"] == 0
        assert r["eval_length"] == kv_length(r["n_pairs"], qf)
        assert r["train_length"] == train_length


def test_tiny_run(tmp_path: Path) -> None:
    ctx = RunContext(TINY, tmp_path)
    litm.run(ctx)
    records = ctx.measurements
    # learned's table: the longest training row (query first, every training query)
    table = kv_length(TINY.kv_pairs, True, litm.train_queries(TINY.kv_pairs))
    assert litm.kv_train_length(TINY.kv_pairs) == table
    _check_grid(records, ENCODINGS, train_length=table)  # the rows it trained on
    for r in records:
        if r["encoding"] == "learned" and r["eval_length"] > table:
            assert r["value"] is None and f"max_positions={table}" in r["note"]
        else:
            assert 0.0 <= r["value"] <= 1.0 and "note" not in r
    # learned runs on the training contexts in both placements, and on none of the longer ones
    learned = {(r["n_pairs"], r["value"] is None) for r in records if r["encoding"] == "learned"}
    assert learned == {(3, False), (8, True)}


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_training_rows_ask_every_key(n: int) -> None:
    """Every pair is asked once per training row, so a row of n pairs (5n + 2 tokens) is
    longer than an evaluation row of 2n (4n + 3) and shorter than one of 4n (8n + 3)."""
    assert litm.train_queries(n) == n
    assert kv_length(2 * n, False) < litm.kv_train_length(n) < kv_length(4 * n, False)


@pytest.mark.slow
def test_the_quick_recipe_learns_retrieval(tmp_path: Path) -> None:
    """The quick preset's key-value model (RoPE, 2,000 steps of batch 64; about 2 minutes on
    2 cores) learns retrieval in distribution: accuracy at least 0.9 over the gold positions,
    where answering a random value of the context scores 1/8. No recipe of a few hundred
    steps was found to leave chance (docs/arena.md, "The model"), so this one is slow."""
    ctx = RunContext(QUICK, tmp_path)
    model = litm.kv_model(ctx, "rope", seed=0)
    generator = torch.Generator().manual_seed(7)
    scores = [
        task_accuracy(model, kv_batch(64, QUICK.kv_pairs, generator, gold=g))
        for g in range(QUICK.kv_pairs)
    ]
    assert min(scores) > 0.5 and sum(scores) / len(scores) >= 0.9, scores


# -- the Hugging Face probe -----------------------------------------------------------------


def _tiny_llama(directory: Path, max_positions: int = 512) -> Path:
    """A random 2-layer Llama (hidden 32) and a byte-level BPE tokenizer trained here."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    text = hf_probe.kv_prompt([("0123abcd", "4567ef89")], 0, query_first=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text], vocab_size=300, min_frequency=1, special_tokens=["<s>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="<s>"
    )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_positions,
    )
    torch.manual_seed(0)
    tokenizer.save_pretrained(directory)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def _probe(run_dir: Path, model_dir: Path) -> list[dict[str, Any]]:
    ctx = RunContext(dataclasses.replace(TINY, encodings=()), run_dir, hf_model=model_dir)
    litm.run(ctx)  # no encodings: only the probe
    return ctx.measurements


def _gold(prompt: str) -> tuple[str, dict[str, str]]:
    """The gold value the prompt asks for, read back from its text, and every pair."""
    pairs = json.loads(prompt[prompt.index("{") : prompt.rindex("}") + 1])
    key = re.findall(r'Key: "([0-9a-f]+)"\nValue:$', prompt)[0]
    return pairs[key], pairs


def test_probe_records_of_a_random_model(tmp_path: Path, llama: Path) -> None:
    records = _probe(tmp_path, llama)
    _check_grid(records, [f"hf:{llama.name}"], train_length=512)  # max_position_embeddings
    assert all(0.0 <= r["value"] <= 1.0 for r in records)


def test_probe_without_max_position_embeddings_records_the_eval_length(
    tmp_path: Path, llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose config has no limit (decoding stubbed out: never called)."""
    load = hf_probe.load_causal_lm

    class Unbounded(torch.nn.Module):
        config = types.SimpleNamespace()

    def unbounded(path: str | Path) -> tuple[Any, Any]:
        return Unbounded(), load(path)[1]

    monkeypatch.setattr(hf_probe, "load_causal_lm", unbounded)
    monkeypatch.setattr(hf_probe, "greedy_continuation", lambda *args: "")
    records = _probe(tmp_path, llama)
    assert records and all(r["train_length"] == r["eval_length"] for r in records)
    assert all(isinstance(r["train_length"], int) and r["value"] == 0.0 for r in records)


def test_probe_scores_the_gold_value_right_and_another_value_wrong(
    tmp_path: Path, llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def right(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int) -> str:
        value, _ = _gold(prompt)
        # the answer fits in the tokens the probe decodes
        assert len(tokenizer(f' "{value}"', add_special_tokens=False).input_ids) < max_new_tokens
        return f' "{value}"\n'

    def wrong(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int) -> str:
        value, pairs = _gold(prompt)
        other = next(v for v in pairs.values() if v != value)
        return f' "{other}"'

    monkeypatch.setattr(hf_probe, "greedy_continuation", right)
    assert {r["value"] for r in _probe(tmp_path / "right", llama)} == {1.0}
    monkeypatch.setattr(hf_probe, "greedy_continuation", wrong)
    assert {r["value"] for r in _probe(tmp_path / "wrong", llama)} == {0.0}


def test_gold_position_is_the_pair_asked_for() -> None:
    pairs = hf_probe.random_pairs(5, torch.Generator().manual_seed(0))
    assert len({k for k, _ in pairs}) == 5
    for gold in range(5):
        for query_first in (False, True):
            prompt = hf_probe.kv_prompt(pairs, gold, query_first)
            assert _gold(prompt)[0] == pairs[gold][1]
            assert list(_gold(prompt)[1].items()) == pairs  # in order: gold is the position
            assert prompt.count(pairs[gold][0]) == (3 if query_first else 2)


def test_prompt_past_the_model_positions_cannot_run(tmp_path: Path) -> None:
    model_dir = _tiny_llama(tmp_path / "short", max_positions=32)
    records = _probe(tmp_path / "run", model_dir)
    assert all(r["value"] is None and "max_position_embeddings=32" in r["note"] for r in records)


def test_not_a_causal_lm_directory(tmp_path: Path, llama: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))):
        hf_probe.load_causal_lm(tmp_path)
    (tmp_path / "config.json").write_text((llama / "config.json").read_text())
    with pytest.raises(ValueError, match="no tokenizer"):
        hf_probe.load_causal_lm(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(llama / name, tmp_path / name)
    with pytest.raises(ValueError, match="not a Hugging Face causal LM directory"):
        hf_probe.load_causal_lm(tmp_path)  # no weights

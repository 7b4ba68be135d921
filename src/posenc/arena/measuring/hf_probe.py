"""The ``lost-in-the-middle`` probe for a local Hugging Face causal LM (``--hf-model DIR``).

Liu et al. 2023 ("Lost in the middle: how language models use long contexts",
arXiv:2307.03172, §4) give a model a JSON object of random key-value pairs and ask for one
key's value. Here keys and values are short random hex strings drawn from a seeded
generator; the prompt is the JSON object, then ``Key: "<k>"`` and ``Value:`` (query-first
puts the key line before the JSON too). The model greedily decodes as many tokens as the
quoted gold value takes, plus one; a row is right when the continuation, less leading spaces
and one opening quote, starts with the gold value (exact match). Records are those of
:mod:`~posenc.arena.experiments.lost_in_the_middle` with encoding ``hf:<directory name>``.
Nothing is downloaded.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import torch

from ..data.tasks import KV_MODES, kv_probes
from ..running.context import RunContext, unit_name

__all__ = ["HEX_DIGITS", "greedy_continuation", "kv_prompt", "load_causal_lm", "run_probe"]

#: hex digits in a key or a value
HEX_DIGITS = 8


def load_causal_lm(path: str | Path) -> tuple[Any, Any]:
    """The causal LM and tokenizer saved in directory ``path`` (local files only).

    Raises:
        ValueError: naming ``path`` when it is not a directory, has no tokenizer, or holds
            no causal language model.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"--hf-model {path}: not a Hugging Face model directory (no config.json)")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"--hf-model {path}: no tokenizer Hugging Face can load ({e})") from e
    if not callable(tokenizer):
        raise ValueError(f"--hf-model {path}: no tokenizer Hugging Face can load")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"--hf-model {path}: not a Hugging Face causal LM directory ({e})") from e
    return model.eval(), tokenizer


def _hex(generator: torch.Generator) -> str:
    digits = torch.randint(0, 16, (HEX_DIGITS,), generator=generator)
    return "".join("0123456789abcdef"[int(d)] for d in digits)


def random_pairs(n_pairs: int, generator: torch.Generator) -> list[tuple[str, str]]:
    """``n_pairs`` (key, value) hex strings, keys distinct."""
    pairs: dict[str, str] = {}
    while len(pairs) < n_pairs:
        key, value = _hex(generator), _hex(generator)
        pairs.setdefault(key, value)
    return list(pairs.items())


def kv_prompt(pairs: list[tuple[str, str]], gold: int, query_first: bool) -> str:
    """The prompt asking for the value of the ``gold``-th pair's key (Liu et al.'s format)."""
    data = json.dumps(dict(pairs), indent=1)
    question = f'Key: "{pairs[gold][0]}"\n'
    intro = "Extract the value of the key from the JSON object.\n"
    prompt = intro + (question if query_first else "") + f"JSON data:\n{data}\n"
    return prompt + question + "Value:"


@torch.no_grad()
def greedy_continuation(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int) -> str:
    """The text ``model`` greedily writes after ``prompt`` in ``max_new_tokens`` tokens."""
    device = next(model.parameters()).device
    encoded = tokenizer(prompt, return_tensors="pt").to(device)  # input_ids: [1, t]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = model.generate(
        **encoded, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad
    )  # [1, t + new]
    return str(tokenizer.decode(out[0, encoded.input_ids.shape[1] :], skip_special_tokens=True))


def is_right(continuation: str, value: str) -> bool:
    """Exact match: the continuation, less leading spaces and one quote, starts with ``value``."""
    text = continuation.lstrip()
    return text.removeprefix('"').startswith(value)


def run_probe(ctx: RunContext, experiment: str) -> None:
    """Probe ``ctx.hf_model`` once per seed (unit ``<experiment>--hf--<dir>--seed<k>``), its
    records under ``experiment``; the model is loaded only when a unit has to be computed."""
    assert ctx.hf_model is not None
    path = ctx.hf_model
    loaded: list[tuple[Any, Any]] = []

    def compute(seed: int) -> list[dict[str, Any]]:
        if not loaded:
            model, tokenizer = load_causal_lm(path)
            loaded.append((model.to(ctx.place.device), tokenizer))
        return _measure(ctx, *loaded[0], experiment, f"hf:{path.name}", seed)

    safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", path.name)
    for seed in ctx.preset.seeds:
        ctx.unit(unit_name(experiment, "hf", safe, f"seed{seed}"), functools.partial(compute, seed))


def _measure(
    ctx: RunContext, model: Any, tokenizer: Any, experiment: str, encoding: str, seed: int
) -> list[dict[str, Any]]:
    """The probe's records. Its training length is not known, and a record's
    ``train_length`` must be an int: it is the model's ``max_position_embeddings`` (the
    context it was built for) when its config has one, else the record's ``eval_length``
    (the probe then claims no extrapolation). ``eval_length`` is the toy task's row length at
    the same number of pairs, as for the trained models, not the prompt's tokens."""
    preset = ctx.preset
    limit = getattr(model.config, "max_position_embeddings", None)
    if not isinstance(limit, int) or isinstance(limit, bool):
        limit = None
    records: list[dict[str, Any]] = []
    bar = ctx.progress.task(f"probe {encoding}", len(KV_MODES) * sum(preset.kv_test_pairs))
    for probe in kv_probes(preset.kv_test_pairs, seed):
        n, gold = probe.n_pairs, probe.gold
        base = probe.record(
            experiment=experiment,
            encoding=encoding,
            seed=seed,
            train_length=probe.length if limit is None else limit,
        )
        right, too_long = 0, 0
        for _ in range(preset.kv_eval_rows):
            pairs = random_pairs(n, probe.generator)
            prompt = kv_prompt(pairs, gold, probe.query_first)
            value = pairs[gold][1]
            answer = len(tokenizer(f' "{value}"', add_special_tokens=False).input_ids)
            length = len(tokenizer(prompt).input_ids) + answer + 1
            if limit is not None and length > limit:
                too_long = length
                break
            right += is_right(greedy_continuation(model, tokenizer, prompt, answer + 1), value)
        if too_long:
            note = f"a prompt of {too_long} tokens exceeds max_position_embeddings={limit}"
            records.append({**base, "value": None, "note": note})
        else:
            records.append({**base, "value": right / preset.kv_eval_rows})
        bar.advance(1)
    bar.close()
    return records

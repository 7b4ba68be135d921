"""Fake arena results: every experiment, two seeds, with the shapes a real run gives
(alibi flat past L, sinusoidal exploding, learned unable to run past L, NoPE failing
without a causal mask, a U-shaped lost-in-the-middle curve, layer plans with NoPE layers
flatter than all RoPE)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

SEEDS = (0, 1)
L = 64
EVAL_LENGTHS = (64, 128, 256, 512)
LG_TRAIN = 16
LG_LENGTHS = (8, 16, 24, 32)


def _jitter(seed: int, scale: float) -> float:
    return 1.0 + scale * (1 if seed == 0 else -1)


def _record(
    experiment: str,
    encoding: str,
    seed: int,
    eval_length: int,
    metric: str,
    value: float | None,
    train_length: int = L,
    **extra: Any,
) -> dict[str, Any]:
    record = {
        "experiment": experiment,
        "encoding": encoding,
        "seed": seed,
        "train_length": train_length,
        "eval_length": eval_length,
        "metric": metric,
        "value": value,
        **extra,
    }
    if value is None:
        record["note"] = "learned absolute positions stop at the training length 64"
    return record


def extrapolation_ppl(encoding: str, eval_length: int, mode: str) -> float | None:
    """The fake perplexity of ``encoding`` at ``eval_length`` (the mean over seeds)."""
    s = eval_length / L
    base = 6.0 if mode == "chunks" else 5.0
    if encoding == "alibi":
        return base * (1.0 + 0.01 * (s - 1))  # flat
    if encoding == "sinusoidal":
        return base * s**3  # explodes: x512 at 8L
    if encoding == "rope":
        return base * (1.0 + 0.5 * (s - 1))  # 4.5x at 8L
    if encoding == "learned":
        return base if eval_length == L else None
    raise AssertionError(encoding)


#: layer-plans: perplexity at L and its growth per doubling of the length
LAYER_PLANS = {
    "rope": (6.0, 0.4),
    "nope": (7.0, 0.02),
    "nope-every-4": (6.1, 0.1),
    "rope-local-nope-global": (6.2, 0.05),
    "alibi": (6.3, 0.0),
}


def _fake_layer_plans() -> list[dict[str, Any]]:
    out = []
    for plan, (at_l, growth) in LAYER_PLANS.items():
        extra: dict[str, Any] = {"n_layers": 4}
        if plan == "rope-local-nope-global":
            extra["window"] = L // 4
        for seed in SEEDS:
            for mode in ("chunks", "sliding"):
                for n in EVAL_LENGTHS:
                    ppl = at_l * (1 + growth) ** ((n // L).bit_length() - 1) * _jitter(seed, 0.01)
                    out.append(
                        _record("layer-plans", plan, seed, n, "perplexity", ppl, mode=mode, **extra)
                    )
    return out


def _fake_measurements() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for encoding in ("sinusoidal", "learned", "rope", "alibi"):
        for seed in SEEDS:
            for mode in ("chunks", "sliding"):
                for n in EVAL_LENGTHS:
                    ppl = extrapolation_ppl(encoding, n, mode)
                    value = None if ppl is None else ppl * _jitter(seed, 0.01)
                    out.append(
                        _record("extrapolation", encoding, seed, n, "perplexity", value, mode=mode)
                    )
    out += _fake_layer_plans()
    scale = {"none": 10.0, "linear": 3.0, "ntk": 2.0, "dynamic": 2.5, "yarn": 1.5}
    for seed in SEEDS:
        for stage in ("zero-shot", "fine-tuned"):
            for scaling, bad in scale.items():
                for factor in (2, 4):
                    ppl = 5.0 * (1 + bad * (factor - 1) / (4 if stage == "fine-tuned" else 1))
                    out.append(
                        _record(
                            "context-extension",
                            "rope",
                            seed,
                            L * factor,
                            "perplexity",
                            ppl * _jitter(seed, 0.02),
                            scaling=scaling,
                            factor=factor,
                            stage=stage,
                        )
                    )
    drop = {"rope": 0.3, "alibi": 0.1, "nope": 0.2}
    for encoding, d in drop.items():
        for seed in SEEDS:
            for task in ("copy", "reverse"):
                for n in LG_LENGTHS:
                    acc = 1.0 if n <= LG_TRAIN else max(0.0, 1.0 - d * (n - LG_TRAIN) / 8)
                    acc = acc * (0.9 if task == "reverse" else 1.0)
                    out.append(
                        _record(
                            "length-generalization",
                            encoding,
                            seed,
                            n,
                            "accuracy",
                            acc,
                            train_length=LG_TRAIN,
                            task=task,
                        )
                    )
    bidir = {"nope": 80.0, "rope": 4.0, "alibi": 4.2}
    for encoding, b in bidir.items():
        for seed in SEEDS:
            out.append(
                _record(
                    "nope-needs-causality",
                    encoding,
                    seed,
                    L,
                    "perplexity",
                    5.0 * _jitter(seed, 0.01),
                    mode="causal",
                )
            )
            out.append(
                _record(
                    "nope-needs-causality",
                    encoding,
                    seed,
                    L,
                    "perplexity",
                    b * _jitter(seed, 0.01),
                    mode="bidirectional",
                )
            )
    for encoding in ("rope", "hf:sshleifer/tiny-gpt2"):
        for seed in SEEDS:
            for mode in ("query-last", "query-first"):
                for n_pairs in (4, 8):
                    for gold in range(n_pairs):
                        mid = (n_pairs - 1) / 2
                        acc = 0.5 + 0.4 * abs(gold - mid) / mid  # U-shaped: 0.9 .. 0.5 .. 0.9
                        acc *= 1.0 if encoding == "rope" else 0.8
                        out.append(
                            _record(
                                "lost-in-the-middle",
                                encoding,
                                seed,
                                8 * n_pairs,
                                "accuracy",
                                acc,
                                mode=mode,
                                task="kv",
                                gold_position=gold,
                                n_pairs=n_pairs,
                            )
                        )
    return out


def _timing_key(r: dict[str, Any]) -> str | None:
    """The timing key of the model behind measurement ``r``: its training unit's name without
    ``train--`` (``lm--rope--seed0``, ``extend--yarn--x2--seed0``); ``None`` for a pretrained
    model (nothing trained)."""
    encoding, seed = r["encoding"], f"seed{r['seed']}"
    if encoding.startswith("hf:"):
        return None
    parts = {
        "extrapolation": ("lm", encoding),
        "layer-plans": ("plan", encoding),
        "context-extension": ("extend", r.get("scaling"), f"x{r.get('factor')}"),
        "length-generalization": (r.get("task"), encoding),
        "nope-needs-causality": ("mlm", encoding),
        "lost-in-the-middle": ("kv", encoding),
    }[r["experiment"]]
    return "--".join(str(p) for p in (*parts, seed))


def _fake_results() -> dict[str, Any]:
    measurements = _fake_measurements()
    timings = {}
    for r in measurements:
        key = _timing_key(r)
        if key is not None:
            speed = 1000.0 + 100 * len(r.get("scaling", r["encoding"]))
            timings[key] = {"seconds": 12.5, "tokens_per_s": speed}
    return {
        "format": 1,
        "config": {"preset": "tiny", "seeds": list(SEEDS), "corpus": "stdlib", "train_length": L},
        "command": ["posenc", "arena", "run", "--preset", "tiny", "--seeds", "2"],
        "versions": {"posenc": "0.1.0", "torch": "2.13.0", "python": "3.11.2", "numpy": "2.4.6"},
        "machine": {"platform": "Linux", "processor": "x86_64", "cpu_count": 2, "torch_threads": 1},
        "timings": timings,
        "experiments": [
            "extrapolation",
            "layer-plans",
            "context-extension",
            "length-generalization",
            "nope-needs-causality",
            "lost-in-the-middle",
        ],
        "measurements": measurements,
    }


_RESULTS = _fake_results()


@pytest.fixture
def fake_results() -> dict[str, Any]:
    """A realistic results.json document covering every experiment with two seeds."""
    return copy.deepcopy(_RESULTS)


@pytest.fixture(scope="session")
def fake_results_shared() -> dict[str, Any]:
    """The same document, built once and shared: read it, never change it."""
    return _RESULTS

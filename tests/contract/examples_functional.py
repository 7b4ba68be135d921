"""Valid calls of posenc's functional callables (see tests/contract/registry.py)."""

from __future__ import annotations

import torch
from tests.contract.registry import call, example

import posenc

__all__: list[str] = []

F = posenc.functional
P = torch.tensor([0, 3, 1, 2])

example("posenc.functional.rope_inv_freq", lambda: call(F.rope_inv_freq, 8, base=10000.0))
example("posenc.functional.sinusoidal", lambda: call(F.sinusoidal, P, 8, base=10000.0))
example(
    "posenc.functional.rope_cos_sin",
    lambda: call(F.rope_cos_sin, P, F.rope_inv_freq(8)[0], attention_factor=1.0),
)

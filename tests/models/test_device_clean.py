"""A forward creates no tensor on the host when its inputs live elsewhere: tables, masks,
positions and caches follow the input's device (a host tensor there is a host-to-device
copy per forward, and a forward a CUDA graph cannot capture).

Run on the meta device in the default suite (it has no values: a tensor made on the CPU
and mixed in fails, and one made on the CPU alone is recorded below) and on CUDA where
there is one (``make gpu-check``). What the meta device cannot reach: kernels that run on
the CPU only (the planner's CPU rows, FIRE's pruning, which reads values) and what CUDA's
own kernels do.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import posenc
from posenc.models import TransformerLM

MODEL_NAMES = [n for n in posenc.available() if posenc.registry.get(n).position_axes == 1]
VOCAB, DIM, LAYERS, HEADS = 37, 32, 2, 4
BATCH, SEQ = 2, 9
DEVICES = [
    "meta",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]

#: frames of torch's compilers: tensors they make while compiling are not the forward's
COMPILER_FRAMES = ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/", "/torch/fx/")


class HostTensors(TorchFunctionMode):
    """Records every torch function (factory, op or method) that posenc calls while active
    whose output holds a CPU tensor with at least one dimension (0-d scalars aside), keyed
    by the posenc lines that called it. What torch's compilers make while compiling (under
    a dynamo or inductor frame) is left out; a compiled region's own work is invisible."""

    def __init__(self):
        super().__init__()
        self.found: dict[str, str] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        host = [
            t
            for t in tree_flatten(out)[0]
            if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0
        ]
        if host:
            stack = traceback.extract_stack()
            if not any(c in f.filename for f in stack for c in COMPILER_FRAMES):
                frames = [
                    f"{f.filename.rsplit('src/', 1)[-1]}:{f.lineno}"
                    for f in stack
                    if "/posenc/" in f.filename and "/tests/" not in f.filename
                ]
                where = " <- ".join(reversed(frames[-3:])) or "outside posenc"
                name = getattr(func, "__name__", str(func))
                self.found.setdefault(where, f"{name} -> {tuple(host[0].shape)}")
        return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("mode", ["train", "decode", "static"])
def test_forward_creates_no_host_tensor(name, mode, device):
    """A training forward and backward, and a cached decode step (prefill, then one token),
    on the device: no torch call of posenc's returns a tensor on the CPU. Each runs once
    unrecorded first, so that what a first call builds (compiled kernels) is not counted."""
    torch.manual_seed(0)
    model = TransformerLM(VOCAB, DIM, LAYERS, HEADS, encoding=name).to(device)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ)).to(device)

    def forward():
        if mode == "train":
            model(ids).sum().backward()
            return
        model.eval()
        cache = model.new_cache(BATCH, SEQ + 1, static=mode == "static")
        with torch.no_grad():
            model(ids, cache=cache)
            model(ids[:, :1], cache=cache)

    forward()
    host = HostTensors()
    with host:
        forward()
    assert not host.found, "tensors made on the host:\n" + "\n".join(
        f"  {where}: {what}" for where, what in host.found.items()
    )

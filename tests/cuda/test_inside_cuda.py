"""posenc inside a transformers model on a CUDA device (:mod:`posenc.hf.apply`): the Triton
rotation, exact rotary and posenc's attention, against transformers' own logits on the same
device.

Marked ``cuda`` and skipped without a CUDA device (``make test`` skips them;
``scripts/gpu_check.py`` runs them). fp32 matmuls run in IEEE fp32 (no TF32), so posenc and
transformers differ by the order of their sums and the float32 angles' error, as on the
CPU (``tests/hf/test_inside.py``: 1e-5); bfloat16 by its rounding (8 bits of mantissa).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.hf import families as F

from posenc.hf import apply, undo
from posenc.hf import triton_rotation as T

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-2}


def logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "patch",
    [
        {"rotary": "exact", "kernel": "triton"},
        {"rotary": None, "kernel": "triton"},
        {"rotary": "exact", "attention": "posenc"},
    ],
    ids=["exact+triton", "triton", "exact+posenc attention"],
)
def test_a_patched_llama_on_cuda_gives_transformers_logits(patch, dtype):
    model = F.build(F.make("llama")).to("cuda", dtype)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (2, 12), generator=gen).cuda()
    mask = torch.ones(2, 12, dtype=torch.long, device="cuda")
    mask[1, :3] = 0
    before = logits(model, ids, mask)
    calls = []
    kernel = T.rotate_with_triton
    T.rotate_with_triton = lambda *a: calls.append(1) or kernel(*a)
    try:
        apply(model, **patch)
        after = logits(model, ids, mask)
    finally:
        T.rotate_with_triton = kernel
        undo(model)
    assert bool(calls) == (patch.get("kernel") == "triton")  # the kernel ran on CUDA
    tol = TOL[dtype]
    torch.testing.assert_close(after[0], before[0], atol=tol, rtol=tol)
    torch.testing.assert_close(after[1, 3:], before[1, 3:], atol=tol, rtol=tol)

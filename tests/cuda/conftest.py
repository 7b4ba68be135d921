"""The CUDA tests' shared setting: fp32 matmuls in IEEE fp32 on the device (no TF32), so
that posenc and its references differ by the order of their sums only."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _ieee_fp32():
    """fp32 matmuls in IEEE fp32 on the device: TF32 would round every product to 10 bits."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(old)

"""Valid calls of posenc's functional callables (see tests/contract/registry.py)."""

from __future__ import annotations

import torch
from tests.contract.registry import P, call, example

import posenc

__all__: list[str] = []

F = posenc.functional


def _rot() -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of positions 0..3 for 4 pairs: ``[4, 4]`` each."""
    return F.rope_cos_sin(torch.arange(4), F.rope_inv_freq(8)[0])


def _x() -> torch.Tensor:
    return torch.randn(1, 2, 4, 8)  # [b, h, s, d]


# --- RoPE --------------------------------------------------------------------------------
example(
    "posenc.functional.rope_inv_freq",
    lambda: call(F.rope_inv_freq, 8, base=10000.0, seq_len=16, rotary_dim=8, device="cpu"),
)
example("posenc.functional.rope_angles", lambda: call(F.rope_angles, P, F.rope_inv_freq(8)[0]))
example(
    "posenc.functional.rope_cos_sin",
    lambda: call(F.rope_cos_sin, P, F.rope_inv_freq(8)[0], attention_factor=1.0),
)
example(
    "posenc.functional.apply_rope",
    lambda: call(F.apply_rope, _x(), *_rot(), layout="interleaved"),
    alias={"cos": ("cos and sin",), "sin": ("cos and sin",)},
)
example(
    "posenc.functional.apply_rope_fast",
    lambda: call(F.apply_rope_fast, _x(), *_rot(), layout="half", kernel="auto", offset=0),
    alias={"cos": ("cos and sin",), "sin": ("cos and sin",)},
)

# --- xPos --------------------------------------------------------------------------------
example("posenc.functional.xpos_zeta", lambda: call(F.xpos_zeta, 8, device="cpu"))
example(
    "posenc.functional.xpos_scale",
    lambda: call(F.xpos_scale, P, F.xpos_zeta(8), scale_base=512.0, center=0.0),
    # center: a centre before position 0 is as valid as one after it
    ok={"center": ("negative",)},
)
example(
    "posenc.functional.xpos_max_distance",
    lambda: call(F.xpos_max_distance, 512.0, dtype=torch.float32),
)
example(
    "posenc.functional.apply_xpos",
    lambda: call(
        F.apply_xpos,
        _x(),
        *_rot(),
        F.xpos_scale(torch.arange(4), F.xpos_zeta(8)),
        layout="half",
        key=True,
        kernel=F.apply_rope,
    ),
    alias={"cos": ("cos and sin",), "sin": ("cos and sin",)},
)

# --- 2-D RoPE, RoPE-Mixed, M-RoPE, latent attention ----------------------------------------
G = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])  # (row, column)
example(
    "posenc.functional.axial_rope_inv_freq",
    lambda: call(F.axial_rope_inv_freq, 8, base=100.0, coord_scale=1.0, device="cpu"),
)
example(
    "posenc.functional.axial_rope_cos_sin",
    lambda: call(F.axial_rope_cos_sin, G, F.axial_rope_inv_freq(8), axis_order="yx"),
)
example(
    "posenc.functional.rope_mixed_freqs",
    lambda: call(F.rope_mixed_freqs, torch.zeros(2), 8, base=10.0),
)
example(
    "posenc.functional.rope_mixed_cos_sin",
    lambda: call(F.rope_mixed_cos_sin, G, torch.randn(2, 3, 2)),
)
example(
    "posenc.functional.default_mrope_section",
    lambda: call(F.default_mrope_section, 8, interleaved=False),
)
example(
    "posenc.functional.check_mrope_section",
    lambda: call(F.check_mrope_section, (2, 3, 3), 8, interleaved=False, spatial_first=False),
)
example(
    "posenc.functional.mrope_axis",
    lambda: call(F.mrope_axis, (4, 2, 2), interleaved=True, device="cpu", spatial_first=False),
)
example(
    "posenc.functional.mrope_cos_sin",
    lambda: call(
        F.mrope_cos_sin,
        torch.arange(4).expand(3, 4),
        F.rope_inv_freq(16)[0],
        F.mrope_axis((2, 3, 3)),
        attention_factor=1.0,
    ),
)
example(
    "posenc.functional.mla_softmax_scale",
    lambda: call(F.mla_softmax_scale, 192, factor=40.0, mscale_all_dim=1.0),
)
example(
    "posenc.functional.join_latent_heads",
    lambda: call(
        F.join_latent_heads,
        torch.zeros(1, 4, 3, 8),
        torch.ones(1, 4, 3, 2),
        torch.zeros(1, 4, 5, 8),
        torch.ones(1, 1, 5, 2),
    ),
)

# --- sinusoidal, grids -------------------------------------------------------------------
example(
    "posenc.functional.sinusoidal_inv_freq",
    lambda: call(F.sinusoidal_inv_freq, 8, base=10000.0, device="cpu", dtype=torch.float64),
)
example(
    "posenc.functional.sinusoidal",
    lambda: call(F.sinusoidal, P, 8, base=10000.0, layout="concat", dtype=torch.float32),
)
example(
    "posenc.functional.sin_cos_encoding",
    lambda: call(
        F.sin_cos_encoding, P, F.sinusoidal_inv_freq(8), layout="concat", dtype=torch.float32
    ),
)
example(
    "posenc.functional.sincos_2d",
    lambda: call(F.sincos_2d, G, 8, base=10000.0, order="row_col", dtype=torch.float32),
)
example(
    "posenc.functional.grid_table_index",
    lambda: call(F.grid_table_index, G, 2, prefix=1),
)
example(
    "posenc.functional.resample_grid_table",
    lambda: call(
        F.resample_grid_table,
        torch.randn(1 + 4, 6),
        (2, 2),
        (3, 3),
        prefix=1,
        mode="bilinear",
        antialias=False,
    ),
)

# --- time --------------------------------------------------------------------------------
T = torch.tensor([0.0, 0.5, 3.25, 10.0])
example(
    "posenc.functional.timestamp_inv_freq",
    lambda: call(F.timestamp_inv_freq, 8, 1.0, 100.0, device="cpu", dtype=torch.float64),
)
example(
    "posenc.functional.timestamp_encoding",
    lambda: call(F.timestamp_encoding, T, 8, 1.0, 100.0, layout="concat", dtype=torch.float32),
)
example(
    "posenc.functional.time2vec",
    lambda: call(F.time2vec, T, torch.randn(4), torch.randn(4)),
)
S = torch.tensor([0, 86400 * 40 + 3600 * 5, 1_700_000_000])
example(
    "posenc.functional.calendar_fields",
    lambda: call(F.calendar_fields, S),
)
example(
    "posenc.functional.calendar_sinusoidal",
    lambda: call(F.calendar_sinusoidal, F.calendar_fields(S), 8, dtype=torch.float32),
)

# --- bias math ---------------------------------------------------------------------------
I = torch.arange(4)  # noqa: E741 - the query/key index of the paper's formulas
example("posenc.functional.alibi_slopes", lambda: call(F.alibi_slopes, 6, device="cpu"))
example(
    "posenc.functional.alibi_slope",
    lambda: call(F.alibi_slope, torch.arange(6, dtype=torch.float64), 6),
)
example(
    "posenc.functional.alibi_bias",
    lambda: call(F.alibi_bias, F.alibi_slopes(2)[:, None, None], I[:, None], I, symmetric=True),
)
example(
    "posenc.functional.t5_relative_bucket",
    lambda: call(
        F.t5_relative_bucket,
        I[None] - I[:, None],
        bidirectional=True,
        num_buckets=8,
        max_distance=16,
    ),
)
example("posenc.functional.shaw_index", lambda: call(F.shaw_index, I[None] - I[:, None], 2))
example(
    "posenc.functional.shaw_key_scores",
    lambda: call(F.shaw_key_scores, torch.randn(1, 2, 4, 8), torch.randn(5, 8), 0.125),
)
example(
    "posenc.functional.shaw_key_bias",
    lambda: call(
        F.shaw_key_bias, torch.randn(1, 2, 4, 5), F.shaw_index(I[None] - I[:, None], 2)[None, None]
    ),
)
example(
    "posenc.functional.shaw_value_term",
    lambda: call(
        F.shaw_value_term,
        torch.rand(1, 2, 4, 4),
        torch.randn(5, 8),
        F.shaw_index(I[None] - I[:, None], 2)[None, None],
    ),
)
example(
    "posenc.functional.kerple_bias",
    lambda: call(
        F.kerple_bias,
        (I[None] - I[:, None]).abs().float(),
        torch.full((2, 1, 1), 1.5),
        torch.full((2, 1, 1), 0.5),
        variant="power",
    ),
)
example(
    "posenc.functional.clamp_straight_through",
    lambda: call(F.clamp_straight_through, torch.randn(4), 0.01, high=2.0),
    # low: a lower bound below 0 is as valid as any other
    ok={"low": ("negative",)},
)
_W = (torch.randn(8), torch.randn(8), torch.randn(2, 8), torch.randn(2))  # w1, b1, w2, b2
example(
    "posenc.functional.fire_psi",
    lambda: call(F.fire_psi, I.float(), torch.tensor(0.5)),
)
example(
    "posenc.functional.fire_input",
    lambda: call(
        F.fire_input,
        I[:, None].float(),
        I[None].float(),
        torch.tensor(0.5),
        torch.tensor(2.0),
        eps=1e-6,
    ),
)
example(
    "posenc.functional.fire_mlp",
    lambda: call(F.fire_mlp, torch.rand(4, 4), torch.tensor(1), *_W),
)
example(
    "posenc.functional.fire_mlp_matmul",
    lambda: call(F.fire_mlp_matmul, torch.rand(4, 4), *_W),
)

# --- dtypes ------------------------------------------------------------------------------
# math_dtype takes its dtypes as *dtypes: no parameter for the probes to replace
example("posenc.functional.math_dtype", lambda: call(F.math_dtype, torch.float16, torch.float64))
example("posenc.functional.wide_dtype", lambda: call(F.wide_dtype, "cpu"))

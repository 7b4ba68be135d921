"""llama.cpp's rotation of a GGUF model, from its metadata, as its CPU backend computes it.

The rules, read from llama.cpp's public code (the version vendored by llama-cpp-python
0.3.36; ``docs/engines.md`` lists them):

- **The model** (``llama_model_base::load_hparams``): ``{arch}.rope.freq_base`` (default
  10000), ``{arch}.rope.scaling.type`` (default ``linear``), ``{arch}.rope.scaling.factor``
  (its inverse is ``freq_scale``; none: 1), ``{arch}.rope.scaling.original_context_length``
  (default ``{arch}.context_length``), ``{arch}.rope.scaling.attn_factor`` (default 1),
  ``{arch}.rope.dimension_count`` (default the key width). Per architecture: DeepSeek-V2/V3
  read ``{arch}.rope.scaling.yarn_log_multiplier`` (divided by 0.1, the converter's
  factor); only Grok and Mistral 3 read ``yarn_beta_fast``/``yarn_beta_slow`` (elsewhere
  32 and 1); sliding-window layers take ``{arch}.rope.freq_base_swa`` and no scaling, or
  the full layers' base and scale where the architecture says so (:data:`SWA_AS_FULL`).
  ``{arch}.rope.scaling.yarn_attn_factor`` is written by the converter but read by no
  architecture.
- **The context** (``llama_context``): ``ext_factor`` is 1 for YaRN, else 0; with it, the
  attention factor is ``mscale(factor)`` (DeepSeek: ``mscale(f, m) / mscale(f, m_all)``),
  divided by the ``1 + 0.1·ln(factor)`` that ggml multiplies back; then times
  ``rope.scaling.attn_factor``. The frequency factors: ``rope_freqs`` (Llama 3), else
  LongRoPE's ``rope_factors_long`` when the context passes the original length, else
  ``rope_factors_short``.
- **ggml** (``ggml_rope_cache_init``, ``rope_yarn``, ``ggml_rope_yarn_corr_dims``): in
  float32, ``θ`` starts at the position and is multiplied by ``base^(-2/n_rot)`` once per
  pair (a running product, not a power per pair), divided by the pair's frequency factor,
  blended with ``freq_scale·θ`` by YaRN's ramp over the correction dims, and ``cos`` and
  ``sin`` are multiplied by the attention factor.

M-RoPE sections are not modelled: a text token has one id on every axis, so its rotation
is this one. What llama.cpp's GPU backends compute (a power per pair) is not this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["SWA_AS_FULL", "GgufRope", "gguf_rope", "rope_cache"]

F32 = np.float32
#: architectures whose sliding-window layers take the full layers' (base, scale)
SWA_AS_FULL = {
    "cohere2": (True, True), "cohere2moe": (True, True), "exaone4": (True, True),
    "exaone-moe": (True, True), "llama4": (True, True), "gpt-oss": (True, True),
    "afmoe": (True, True), "olmo2": (True, False), "muse-glimmer": (True, False),
}  # fmt: skip
#: architectures that read the YaRN betas from the file (elsewhere 32 and 1)
READS_BETAS = {"grok", "mistral3"}
#: architectures that read ``yarn_log_multiplier`` (DeepSeek's ``mscale_all_dim``)
READS_LOG_MUL = {"deepseek2", "deepseek32"}


@dataclass(frozen=True)
class GgufRope:
    """The arguments llama.cpp passes ``ggml_rope_ext`` for one layer type.

    Attributes:
        n_rot: the rotated width (pairs: ``n_rot // 2``).
        freq_base, freq_scale: the base and the interpolation (``1 / factor``).
        ext_factor: YaRN's blend (1 for YaRN, else 0).
        attn_factor: the attention factor passed to ggml (before ggml's own YaRN factor).
        beta_fast, beta_slow: YaRN's ramp, in rotations.
        n_ctx_orig: the original length YaRN's ramp is measured at.
        freq_factors: each pair's divisor (Llama 3's ``rope_freqs``, LongRoPE's), or None.
        source: what was read, for the table (``"yarn ×4"``, ``"rope_freqs"``...).
    """

    n_rot: int
    freq_base: float
    freq_scale: float
    ext_factor: float
    attn_factor: float
    beta_fast: float
    beta_slow: float
    n_ctx_orig: int
    freq_factors: tuple[float, ...] | None
    source: str


def gguf_rope(
    kv: dict[str, Any], tensors: dict[str, list[float]], layer_type: str | None, n_ctx: int
) -> GgufRope:
    """What llama.cpp makes of GGUF metadata ``kv`` (key -> value) and its rope tensors
    (``rope_freqs.weight``...) for one layer type (``"sliding_attention"`` is a
    sliding-window layer), in a context of ``n_ctx`` tokens.

    Raises:
        ValueError: a scaling type llama.cpp does not know.
    """
    arch = kv["general.architecture"]

    def get(key: str, default: Any = None) -> Any:
        return kv.get(f"{arch}.{key}", default)

    kind = str(get("rope.scaling.type", "linear"))
    if kind not in ("none", "linear", "yarn", "longrope"):
        raise ValueError(f"llama.cpp knows no rope scaling type {kind!r}")
    factor = float(get("rope.scaling.factor") or get("rope.scale_linear") or 0)
    scale = 1.0 if factor == 0 or kind == "none" else float(F32(1) / F32(factor))
    base = float(get("rope.freq_base", 10000.0))
    context = int(get("context_length", n_ctx))
    orig = int(get("rope.scaling.original_context_length", context))
    heads = get("attention.head_count", 1) or 1
    heads = int(heads[0] if isinstance(heads, list) else heads)  # per layer: layer 0's
    width = int(get("attention.key_length", int(get("embedding_length", 0)) // heads))
    n_rot = int(get("rope.dimension_count", width))
    if layer_type == "sliding_attention":
        same_base, same_scale = SWA_AS_FULL.get(arch, (False, False))
        base = float(get("rope.freq_base_swa", base if same_base else 10000.0))
        scale = scale if same_scale else 1.0
        n_rot = int(get("rope.dimension_count_swa", n_rot))
    fast, slow = 32.0, 1.0
    if arch in READS_BETAS:
        fast = float(get("rope.scaling.yarn_beta_fast", fast))
        slow = float(get("rope.scaling.yarn_beta_slow", slow))
    ext = 1.0 if kind == "yarn" else 0.0
    log_mul = (
        float(get("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1 if arch in READS_LOG_MUL else 0.0
    )
    attn = _attn_factor(arch, ext, scale, log_mul) * float(get("rope.scaling.attn_factor", 1.0))
    factors, named = _freq_factors(tensors, n_ctx, orig)
    source = f"base {base:g}" + (f", {kind} ×{1 / scale:g}" if scale != 1 else "") + named
    return GgufRope(n_rot, base, scale, ext, attn, fast, slow, orig, factors, source)


def _mscale(scale: float, m: float) -> float:
    return 1.0 if scale <= 1 else float(F32(0.1) * F32(m) * F32(math.log(F32(scale))) + F32(1))


def _attn_factor(arch: str, ext: float, freq_scale: float, log_mul: float) -> float:
    """``cparams.yarn_attn_factor`` before ``rope.scaling.attn_factor``."""
    if ext == 0:
        return 1.0
    factor = float(F32(1) / F32(freq_scale))
    if log_mul != 0:
        m = log_mul if arch == "deepseek2" and log_mul != 1 else 1.0
        attn = _mscale(factor, m) / _mscale(factor, log_mul)
    else:
        attn = _mscale(factor, 1.0)
    return float(F32(attn) / (F32(1) + F32(0.1) * F32(math.log(F32(factor)))))


def _freq_factors(tensors: dict[str, list[float]], n_ctx: int,
                  orig: int) -> tuple[tuple[float, ...] | None, str]:  # fmt: skip
    if "rope_freqs.weight" in tensors:
        return tuple(tensors["rope_freqs.weight"]), ", rope_freqs"
    if "rope_factors_long.weight" in tensors:
        which = "long" if n_ctx > orig else "short"
        return tuple(tensors[f"rope_factors_{which}.weight"]), f", rope_factors_{which}"
    return None, ""


def rope_cache(rope: GgufRope, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ggml's ``(cos, sin)`` per pair at ``positions``, float32 step by step as its CPU
    backend forms them (``powf``, ``logf``, ``cosf`` taken as correctly rounded).

    Shapes:
        positions ``[n]`` -> cos, sin ``[n, n_rot // 2]`` float32.
    """
    n = rope.n_rot
    theta_scale = F32(math.pow(F32(rope.freq_base), F32(-2.0) / F32(n)))
    low, high = _corr_dims(rope)
    theta = positions.numpy().astype(F32)
    scale, mscale = F32(rope.freq_scale), F32(rope.attn_factor)
    if rope.ext_factor != 0:
        mscale = mscale * (F32(1) + F32(0.1) * F32(math.log(F32(1) / scale)))
    cos, sin = [], []
    for pair in range(n // 2):
        extrap = theta if rope.freq_factors is None else theta / F32(rope.freq_factors[pair])
        angle = scale * extrap
        if rope.ext_factor != 0:
            y = (F32(pair) - low) / max(F32(0.001), high - low)
            mix = (F32(1) - min(F32(1), max(F32(0), y))) * F32(rope.ext_factor)
            angle = angle * (F32(1) - mix) + extrap * mix
        wide = angle.astype(np.float64)
        cos.append((np.cos(wide).astype(F32)) * mscale)
        sin.append((np.sin(wide).astype(F32)) * mscale)
        theta = theta * theta_scale
    return torch.from_numpy(np.stack(cos, -1)), torch.from_numpy(np.stack(sin, -1))


def _corr_dims(rope: GgufRope) -> tuple[np.float32, np.float32]:
    """``ggml_rope_yarn_corr_dims``: the pairs YaRN's ramp runs between, in float32."""

    def dim(rotations: float) -> np.float32:
        ratio = F32(rope.n_ctx_orig) / (F32(rotations) * F32(2) * F32(math.pi))
        return (
            F32(rope.n_rot) * F32(math.log(ratio)) / (F32(2) * F32(math.log(F32(rope.freq_base))))
        )

    start = F32(math.floor(dim(rope.beta_fast)))
    end = F32(math.ceil(dim(rope.beta_slow)))
    return max(F32(0), start), min(F32(rope.n_rot - 1), end)

"""Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864).

Pair i of a query or key at position m is rotated by the angle m·θ_i, so that
⟨R(m) q, R(n) k⟩ depends on q, k and n - m only, and norms are kept.

Two pair layouts exist in the wild, and a checkpoint only works in the one it was trained in:

- ``half`` (GPT-NeoX, Hugging Face Llama): pair i is dimensions (i, i + d/2);
- ``interleaved`` (the paper, GPT-J, Meta's reference code): pair i is (2i, 2i + 1).

They differ by a fixed permutation of the q/k dimensions
(:func:`posenc.rotary.permute_for_layout` converts projection weights).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ..arguments import (
    check_base,
    check_choice,
    check_device,
    check_devices,
    check_float,
    check_int,
    check_movable,
    check_tensor,
)
from .dtypes import math_dtype, wide_dtype
from .rope_scaling import ENCODING_KEYS, ROPE_SCALINGS, scaling_keys

__all__ = [
    "ROPE_LAYOUTS",
    "ROTARY_AT",
    "apply_rope",
    "check_angle_inputs",
    "check_rope_inputs",
    "check_scaling_params",
    "narrow_tables",
    "rope_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotary_offset",
    "rotate_pairs",
    "rotate_qk",
    "rotate_wide",
    "shared_wide_tables",
    "split_rope_parameters",
    "widen_tables",
]

ROPE_LAYOUTS = ("half", "interleaved")
#: where a head's rotary channels sit: its first ``rotary_dim`` or its last (DeepSeek-V4)
ROTARY_AT = ("start", "end")


def rotary_offset(rotary_at: str, head_dim: int, pairs: int) -> int:
    """The first rotary channel of a head of ``head_dim`` whose ``pairs`` pairs sit at its
    ``"start"`` or its ``"end"`` (:data:`ROTARY_AT`)."""
    if rotary_at not in ROTARY_AT:
        raise ValueError(f"rotary_at must be one of {list(ROTARY_AT)}, got {rotary_at!r}")
    return 0 if rotary_at == "start" else head_dim - 2 * pairs


def rope_inv_freq(
    head_dim: int,
    base: float = 10000.0,
    scaling: Mapping[str, Any] | None = None,
    seq_len: int | None = None,
    *,
    rotary_dim: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, float]:
    """The per-pair frequencies θ_i and the attention factor of a (scaled) RoPE.

    Args:
        head_dim: size of each attention head.
        base: the wavelength base (``rope_theta``).
        scaling: a Hugging Face ``rope_parameters`` dict (``{"rope_type": "yarn",
            "factor": 4.0, ...}``), a record of :mod:`posenc.rotary.scaling`, or None; see
            :mod:`posenc.functional.rope_scaling`. Keys are checked by name here, values
            by the records (what :func:`posenc.create` builds).
        seq_len: the current sequence length, for the length-dependent scalings
            (``dynamic``, ``longrope``).
        rotary_dim: how many leading dimensions of each head rotate (default ``head_dim``).
        device: where ``inv_freq`` is made.

    Returns:
        ``(inv_freq, attention_factor)``: ``inv_freq`` ``[rotary_dim // 2]`` in float64
        (``[head_dim // 2]`` for ``proportional``), and the factor that multiplies cos/sin.

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range, named.
    """
    check_int("head_dim", head_dim, minimum=2, even=True)
    check_base("base", base)
    if seq_len is not None:
        check_int("seq_len", seq_len)
    if rotary_dim is not None:
        check_int("rotary_dim", rotary_dim, minimum=2, even=True, maximum=head_dim)
    device = check_device(device)
    if scaling is not None and not isinstance(scaling, Mapping) and hasattr(scaling, "to_dict"):
        scaling = scaling.to_dict()  # a validated record
    rope_type, params, _ = split_rope_parameters(scaling)
    check_scaling_params(rope_type, params)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    return ROPE_SCALINGS[rope_type](head_dim, rotary_dim, float(base), seq_len, device, **params)


def check_scaling_params(rope_type: str, params: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming any unknown or missing key of ``params`` for ``rope_type``,
    and the accepted ones. Names only: :mod:`posenc.rotary.scaling` checks the values."""
    required, accepted = scaling_keys(rope_type)
    unknown = sorted(set(params) - set(accepted))
    missing = [k for k in required if k not in params]
    for problem, keys in (("unknown", unknown), ("missing required", missing)):
        if keys:
            raise ValueError(
                f"{problem} key(s) {keys} for rope scaling {rope_type!r}; accepted keys: {accepted}"
            )


def split_rope_parameters(
    scaling: Mapping[str, Any] | None,
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A Hugging Face ``rope_parameters`` dict split into what each part of posenc reads.

    ``rope_type`` (or the legacy ``type``; default ``"default"``) picks the scaling
    (``"dynamic"`` with an ``alpha`` is ``"ntk_alpha"``, as transformers' Hunyuan models
    read it); ``rope_theta`` and ``partial_rotary_factor`` configure the encoding itself
    and are returned apart. Keys are not checked here (see :func:`check_scaling_params`).

    Args:
        scaling: the dict, or None for no scaling.

    Returns:
        ``(rope_type, params, encoding_keys)``: the scaling's name, its parameters, and
        ``rope_theta`` / ``partial_rotary_factor`` if present.

    Raises:
        ValueError: an unknown ``rope_type``, or ``type`` and ``rope_type`` that disagree.
    """
    if scaling is None:
        return "default", {}, {}
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict or None, got {type(scaling).__name__}")
    params = dict(scaling)
    if "type" in params:
        legacy = params.pop("type")
        if params.setdefault("rope_type", legacy) != legacy:
            raise ValueError(f"scaling has type={legacy!r} and rope_type={params['rope_type']!r}")
    rope_type = params.pop("rope_type", "default")
    if rope_type == "dynamic" and params.get("alpha"):  # Hunyuan's label of a static NTK
        rope_type = "ntk_alpha"
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"unknown rope_type {rope_type!r}; accepted: {sorted(ROPE_SCALINGS)}")
    encoding_keys = {k: params.pop(k) for k in ENCODING_KEYS if k in params}
    return rope_type, params, encoding_keys


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Angles ``positions ⊗ inv_freq`` reduced modulo 2π, computed in float64.

    A float32 product loses the phase at large positions (an angle of 1e7 radians has a
    float32 spacing of 1); float64 keeps it to ~1e-9 rad up to 1e7 and beyond. Devices
    without float64 (Apple MPS) fall back to float32.

    Shapes:
        positions ``[...]``, inv_freq ``[n]`` -> ``[..., n]`` (float64, or float32 on MPS)
    """
    check_angle_inputs(positions, inv_freq)
    return _angles(positions, inv_freq)


def check_angle_inputs(positions: torch.Tensor, inv_freq: torch.Tensor) -> None:
    """Raise unless ``positions`` is an integer or floating tensor and ``inv_freq`` a 1-D
    floating one that can be moved to the positions' device (kept elsewhere, a table made
    once serves every device). Shape, dtype and device facts only: no value is read.

    Shapes:
        positions ``[...]``, inv_freq ``[n]``
    """
    check_tensor("positions", positions, kinds=("int", "float"))
    check_tensor("inv_freq", inv_freq, dims=(1,))
    check_movable("inv_freq", inv_freq, positions.device)


def _angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """:func:`rope_angles` of checked inputs."""
    dtype = wide_dtype(positions.device)
    angles = positions.to(dtype).unsqueeze(-1) * inv_freq.to(positions.device, dtype)
    return torch.remainder(angles, 2 * math.pi)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles, times the attention factor, in float32.

    This is the one place the attention factor (YaRN's temperature, LongRoPE's scale) is
    applied: multiplying both cos and sin scales q and k, hence the logits by its square,
    as the reference implementations do.

    Shapes:
        positions ``[seq]`` or ``[batch, seq]``, inv_freq ``[n]`` ->
        cos, sin ``[seq, n]`` or ``[batch, seq, n]`` (float32; float64 positions keep float64)
    """
    check_angle_inputs(positions, inv_freq)
    check_float("attention_factor", attention_factor)
    out = math_dtype(positions.dtype)
    angles = _angles(positions, inv_freq)
    return (angles.cos() * attention_factor).to(out), (angles.sin() * attention_factor).to(out)


def apply_rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> torch.Tensor:
    """Rotate the pairs of ``x`` by the angles whose cos/sin are given.

    The first ``2 * cos.shape[-1]`` dimensions of each head rotate (partial rotary: the
    rest pass through unchanged). The math runs in float32 (float64 for float64 input) and
    is rounded once to ``x.dtype``.

    cos/sin may also be 4-D, one rotation per head (RoPE-Mixed's learned frequencies).

    Shapes:
        x ``[batch, heads, seq, head_dim]``; cos, sin ``[seq, n]``, ``[batch, seq, n]`` or
        ``[batch or 1, heads, seq, n]`` with ``2n <= head_dim`` ->
        ``[batch, heads, seq, head_dim]``
    """
    check_rope_inputs(x, cos, sin, layout)
    return rotate_pairs(x, cos, sin, layout)


def check_rope_inputs(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, offset: int = 0
) -> None:
    """Raise unless :func:`apply_rope` can rotate ``x`` by ``cos``/``sin`` from channel
    ``offset`` on: floating tensors on one device, cos and sin of one shape whose ``2n``
    channels fit in ``x``'s last dimension after ``offset``, a known ``layout``. Shape,
    dtype and device facts only: no value is read.

    Shapes:
        x ``[batch, heads, seq, head_dim]``; cos, sin ``[seq, n]``, ``[batch, seq, n]`` or
        ``[batch or 1, heads, seq, n]``
    """
    check_tensor("x", x, kinds=("float",))
    check_tensor("cos", cos, kinds=("float",), dims=(2, 3, 4))
    check_tensor("sin", sin, kinds=("float",), dims=(2, 3, 4))
    check_choice("layout", layout, ROPE_LAYOUTS)
    check_devices(x=x, cos=cos, sin=sin)
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have one shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    check_int("offset", offset, minimum=0)
    pairs, head_dim = cos.shape[-1], (x.shape[-1] if x.dim() else 0)
    if offset + 2 * pairs > head_dim:
        raise ValueError(
            f"cos and sin rotate {pairs} pairs ({2 * pairs} channels) but x has "
            f"{head_dim - offset} channels from offset {offset}: cos and sin are from a "
            "rotation of another head_dim"
        )
    heads = x.shape[1] if x.dim() >= 4 else 1
    if cos.dim() == 4 and cos.shape[1] not in (1, heads):  # [b, h, s, n]: per head
        raise ValueError(
            f"per-head cos/sin have {cos.shape[1]} heads but x has {heads}: "
            "they must be [batch or 1, heads of x (or 1), seq, n]"
        )


def rotate_pairs(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> torch.Tensor:
    """:func:`apply_rope` of inputs :func:`check_rope_inputs` passed: the math alone, for
    the kernels that compile it and the callers that checked once.

    Shapes:
        as :func:`apply_rope`.
    """
    n = cos.shape[-1]
    if cos.dim() == 3:  # [b, s, n] -> [b, 1, s, n]: one rotation for every head
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    dtype = math_dtype(x.dtype, cos.dtype)
    cos, sin = cos.to(dtype), sin.to(dtype)
    rot = x[..., : 2 * n].to(dtype)
    # each half is rounded to x.dtype before it is joined (the same roundings as after):
    # then the join moves x.dtype, not float32, and one cat joins the halves and the
    # dimensions that do not rotate (torch.compile fuses it all into one pass)
    if layout == "half":
        x1, x2 = rot[..., :n], rot[..., n:]
        parts = [(x1 * cos - x2 * sin).to(x.dtype), (x2 * cos + x1 * sin).to(x.dtype)]
    else:
        pairs = rot.unflatten(-1, (n, 2))  # [b, h, s, n, 2]
        x1, x2 = pairs[..., 0], pairs[..., 1]
        first, second = (x1 * cos - x2 * sin).to(x.dtype), (x2 * cos + x1 * sin).to(x.dtype)
        parts = [torch.stack((first, second), dim=-1).flatten(-2)]
    if 2 * n < x.shape[-1]:
        parts.append(x[..., 2 * n :])
    return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]


def rotate_wide(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> torch.Tensor:
    """:func:`rotate_pairs` by tables widened to the channels (:func:`widen_tables`:
    ``cos_w = (cos, cos)``, ``sin_w = (−sin, sin)`` on each pair's channels), computed on
    whole rows as ``x·cos_w + swap(x)·sin_w``, ``swap`` exchanging each pair's channels:
    each product rounded before the sum as in the formula, the signs exact, so the values
    are :func:`rotate_pairs`'s to the bit. Four kernels where :func:`rotate_pairs` takes
    nine: the eager form for small tensors, whose cost is their launches (compiled,
    :func:`rotate_pairs` fuses into one loop: inductor vectorises it, not this one's
    swap).

    Shapes:
        x ``[..., heads, seq, head_dim]``; cos, sin ``[seq, 2n]`` or ``[..., seq, 2n]``
        broadcasting over the heads, ``2n <= head_dim`` -> x's shape and dtype.
    """
    dtype = math_dtype(x.dtype, cos.dtype)
    if cos.dtype != dtype:  # (no-op casts are spared: a small call's time is its host's)
        cos, sin = cos.to(dtype), sin.to(dtype)
    channels = cos.shape[-1]
    partial = channels < x.shape[-1]
    rot = x[..., :channels] if partial else x
    if rot.dtype != dtype:
        rot = rot.to(dtype)
    if layout == "half":  # pair i is channels (i, i + n): swap the halves
        swapped = rot.roll(channels // 2, -1)
    else:  # pair i is channels (2i, 2i + 1)
        swapped = rot.unflatten(-1, (channels // 2, 2)).flip(-1).flatten(-2)
    turned = rot * cos + swapped * sin
    if turned.dtype != x.dtype:
        turned = turned.to(x.dtype)
    return torch.cat((turned, x[..., channels:]), dim=-1) if partial else turned


def widen_tables(
    cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin on the channels they turn: each pair's ``(cos, cos)`` and ``(−sin,
    sin)``, at channels ``(i, i + n)`` for ``"half"`` and ``(2i, 2i + 1)`` for
    ``"interleaved"`` (:func:`rotate_wide` takes them;
    :func:`narrow_tables` gives cos and sin back).

    Shapes:
        cos, sin ``[..., n]`` -> ``[..., 2n]``
    """
    if layout == "half":
        return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
    return torch.stack((cos, cos), dim=-1).flatten(-2), torch.stack((-sin, sin), dim=-1).flatten(-2)


def narrow_tables(
    cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of :func:`widen_tables`: cos and sin of each pair, as views.

    Shapes:
        cos, sin ``[..., 2n]`` -> ``[..., n]``
    """
    if layout == "half":
        n = cos.shape[-1] // 2
        return cos[..., :n], sin[..., n:]
    return cos[..., 0::2], sin[..., 1::2]


def shared_wide_tables(
    cos: torch.Tensor, sin: torch.Tensor, layout: str, wide: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One rotation for every row of a batch as :func:`rotate_wide` takes it: ``[1, seq,
    n]`` squeezed to ``[seq, n]``, widened (:func:`widen_tables`) unless ``wide``.

    Shapes:
        cos, sin ``[seq, n]`` or ``[1, seq, n]`` (``2n`` wide with ``wide``) -> ``[seq, 2n]``.
    """
    if cos.dim() == 3:  # [1, seq, n]: the rows have no batch axis
        cos, sin = cos.squeeze(0), sin.squeeze(0)
    if not wide:
        cos, sin = widen_tables(cos, sin, layout)
    return cos, sin


def rotate_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "half",
    *,
    wide: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rotate_pairs(q, ...), rotate_pairs(k, ...))`` in one pass: the heads of q and k
    (of one dtype) stacked, rotated once, split. For small tensors, whose cost is the
    kernels' launches and not their bytes, this halves the launches; the values are those
    of :func:`rotate_pairs` (the same operations on the same elements), the results
    contiguous.

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``; cos,
        sin ``[seq, n]`` or ``[1, seq, n]``, one rotation for every row of the batch
        (``2n`` wide with ``wide``: :func:`widen_tables`) -> q, k rotated, their shapes.
    """
    cos, sin = shared_wide_tables(cos, sin, layout, wide)
    if q.shape[0] == 1:  # the heads of q and k side by side, split back without a copy
        turned = rotate_wide(torch.cat((q, k), dim=1), cos, sin, layout)
        q_out, k_out = turned.split_with_sizes((q.shape[1], k.shape[1]), dim=1)
        return q_out, k_out
    batch, heads, seq, dim = q.shape
    sizes = (batch * heads, batch * k.shape[1])
    rows = torch.cat((q.reshape(sizes[0], seq, dim), k.reshape(sizes[1], seq, dim)))
    q_out, k_out = rotate_wide(rows, cos, sin, layout).split_with_sizes(sizes)
    return q_out.view(q.shape), k_out.view(k.shape)

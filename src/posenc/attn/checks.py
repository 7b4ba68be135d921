"""The checks of :func:`posenc.attention`'s arguments: q, k and v, the scale, the
encoding, a precomputed bias table, a shared context, the soft cap and the sinks; each
raises a ``TypeError`` or ``ValueError`` that names the argument and what was expected.
:func:`finite` reads whether the inputs' values are finite (the one value read on the
host), which decides where a call may run."""

from __future__ import annotations

import math
from typing import cast

import torch

from ..arguments import check_float
from ..base import BiasEncoding, Encoding, InputBias, InputTransforms
from ..functional.dtypes import math_dtype
from ..host_reads import reads_values, validation_enabled
from .masks import AttentionContext

#: the backends a caller may ask for
BACKENDS = ("auto", "flex", "sdpa", "math")

__all__ = [
    "BACKENDS",
    "check_call",
    "check_context",
    "check_encoding",
    "check_flex",
    "check_heads",
    "check_qkv",
    "check_scale",
    "check_sinks",
    "check_softcap",
    "check_table",
    "finite",
    "finite_sums",
    "zero_nonfinite",
]


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating-point tensor, got {got}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be [batch, heads, seq, head_dim], got shape {tuple(t.shape)}"
            )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if 0 in t.shape:
            raise ValueError(
                f"{name} must have at least one batch row, head, position and head_dim "
                f"channel, got shape {tuple(t.shape)}"
            )
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"k and v must have the same heads and length, got {k.shape}, {v.shape}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(
            f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k head_dim differ: {q.shape[-1]} vs {k.shape[-1]}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must share a device, got {q.device}, {k.device}, {v.device}")


def check_scale(scale: float | None, head_dim: int) -> float:
    """The score scale: ``1/sqrt(head_dim)`` by default, else a finite number > 0 of a
    magnitude in ``[1 / MAX_FLOAT, MAX_FLOAT]`` (:func:`~posenc.arguments.check_float`)."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a number or None, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    check_float("scale", scale)  # and no scores scaled past float range
    return float(scale)


def check_table(
    table: torch.Tensor | None,
    encoding: Encoding | None,
    q: torch.Tensor,
    k_len: int,
    kv_heads: int | None = None,
) -> None:
    """Raise unless ``table`` can be the precomputed bias of ``encoding`` for ``q``: its
    ``[(batch,) heads, q_len, k_len]`` table, the ``[batch, heads, k_len]`` clock of an
    :class:`~posenc.base.InputBias` (FoX) or the ``[batch, kv_heads, k_len, head_dim]``
    transforms of an :class:`~posenc.base.InputTransforms` (PaTH), which must be given."""
    if not isinstance(encoding, BiasEncoding):
        got = "None" if encoding is None else repr(encoding.info.name)
        raise ValueError(f"bias is the table of a bias encoding, but the encoding is {got}")
    name = encoding.info.name
    if isinstance(encoding, InputTransforms):
        _check_transforms(table, name, q, k_len, kv_heads)
        return
    reads_input = isinstance(encoding, InputBias)
    if reads_input and table is None:
        raise ValueError(
            f"{name!r}'s bias is computed from the layer's input: pass bias={name}.clock(x), "
            "the clock of the keys' tokens [batch, heads, k_len]"
        )
    if encoding.needs_q:
        raise ValueError(
            f"{name!r} computes its bias from q: it cannot be precomputed; pass bias=None"
        )
    if not isinstance(table, torch.Tensor) or not table.is_floating_point():
        kind = table.dtype if isinstance(table, torch.Tensor) else type(table).__name__
        raise TypeError(f"bias must be a floating-point tensor, got {kind}")
    b, h, q_len = q.shape[:3]
    if reads_input:
        if tuple(table.shape) != (b, h, k_len):
            raise ValueError(
                f"bias must be the clock of {name!r}, [batch, heads, k_len] = [{b}, {h}, "
                f"{k_len}], got shape {tuple(table.shape)}"
            )
    elif table.shape[-3:] != (h, q_len, k_len) or (
        table.dim() != 3 and (table.dim() != 4 or (table.shape[0] != 1 and table.shape[0] != b))
    ):
        raise ValueError(
            f"bias must be [heads, q_len, k_len] = [{h}, {q_len}, {k_len}] or [batch | 1, "
            f"heads, q_len, k_len], got shape {tuple(table.shape)}"
        )
    if table.device != q.device:
        raise ValueError(f"bias is on {table.device} but q is on {q.device}: move bias there")


def _check_transforms(
    table: torch.Tensor | None, name: str, q: torch.Tensor, k_len: int, kv_heads: int | None
) -> None:
    """Raise unless ``table`` is the transforms of the keys' tokens that an
    :class:`~posenc.base.InputTransforms` encoding (PaTH) takes: ``[batch, kv_heads,
    k_len, head_dim]``, floating point, on q's device."""
    b, d = q.shape[0], q.shape[-1]
    kv = q.shape[1] if kv_heads is None else kv_heads
    if table is None:
        raise ValueError(
            f"{name!r}'s scores pass through transforms of the layer's input: pass "
            f"bias={name}.transforms(x), those of the keys' tokens [batch, kv_heads, k_len, "
            "head_dim]"
        )
    if not isinstance(table, torch.Tensor) or not table.is_floating_point():
        kind = table.dtype if isinstance(table, torch.Tensor) else type(table).__name__
        raise TypeError(f"bias must be a floating-point tensor, got {kind}")
    if tuple(table.shape) != (b, kv, k_len, d):
        raise ValueError(
            f"bias must be the transforms of {name!r}, [batch, kv_heads, k_len, head_dim] = "
            f"[{b}, {kv}, {k_len}, {d}], got shape {tuple(table.shape)}"
        )
    if table.device != q.device:
        raise ValueError(f"bias is on {table.device} but q is on {q.device}: move bias there")


def check_heads(encoding: BiasEncoding, q: torch.Tensor) -> None:
    """Raise unless ``q`` has the encoding's heads and, where the encoding reads ``q``
    through tables of a width of its own (Shaw, CoPE: ``head_dim``), that width."""
    heads = encoding.config.n_heads  # what the n_heads property reads, with no call
    if q.shape[1] != heads:
        raise ValueError(
            f"q has {q.shape[1]} heads but the encoding {type(encoding).__name__} has "
            f"n_heads={heads}"
        )
    # asked where it is (a miss on a module builds and catches an AttributeError)
    known = hasattr(type(encoding), "head_dim") or "head_dim" in encoding.__dict__
    width = getattr(encoding, "head_dim", None) if known else None
    if width is not None and q.shape[-1] != width:
        raise ValueError(
            f"q has head_dim={q.shape[-1]} but the encoding {type(encoding).__name__} has "
            f"head_dim={width} (the width of its tables): create it with head_dim="
            f"{q.shape[-1]}"
        )


def check_encoding(encoding: Encoding | None) -> str | None:
    """The kind of ``encoding`` (None for None); raises for anything but an Encoding of a
    known kind."""
    if encoding is None:
        return None
    if not isinstance(encoding, Encoding):
        raise TypeError(
            f"encoding must be an Encoding (e.g. posenc.create({encoding!r}, ...)) or None, "
            f"got {type(encoding).__name__}"
        )
    if encoding.kind not in ("none", "rotary", "bias", "additive"):
        raise ValueError(f"unknown encoding kind {encoding.kind!r}")
    return encoding.kind


def check_call(
    encoding: Encoding | None,
    kind: str | None,
    q: torch.Tensor,
    k: torch.Tensor,
    table: torch.Tensor | None,
    sinks: torch.Tensor | None,
    backend: str,
    reads_input: bool,
) -> None:
    """Raise, naming the argument, unless the backend is known and the encoding of
    ``kind`` (its heads), the bias ``table`` (FoX's clock or PaTH's transforms where the
    encoding ``reads_input``) and the sinks suit q and k; an additive encoding is refused (it acts
    at the input)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if kind == "bias":
        check_heads(cast(BiasEncoding, encoding), q)
    if table is not None or reads_input:
        check_table(table, encoding, q, k.shape[2], k.shape[1])
    check_sinks(sinks, q.shape[1], q.device)
    if kind == "additive":
        assert encoding is not None, "an additive kind is an encoding's"
        raise ValueError(
            f"{encoding.info.name!r} is an additive encoding: add it to the token embeddings "
            "(enc(x)) before the first layer instead of passing it to attention"
        )


def check_flex(cpu_training: bool, refused: BiasEncoding | None) -> None:
    """Raise unless flex attention, asked for (``backend="flex"``), can run the call: not
    training on the CPU (compiled flex has no backward there), nor with an encoding whose
    score_mod it cannot differentiate (``refused``, where a backward runs)."""
    if cpu_training:
        raise ValueError(
            "compiled flex attention has no backward on the CPU: use backend='sdpa' (or "
            "'auto'), or call under torch.no_grad() with inputs that do not require grad"
        )
    if refused is not None:
        raise ValueError(
            f"flex attention cannot differentiate {refused.info.name!r}'s score_mod (it indexes "
            "a parameter more than once): use backend='sdpa' (or 'auto') to train, or call "
            "under torch.no_grad()"
        )


def check_context(context, q, k, *given) -> None:
    """Raise unless ``context`` is an :class:`AttentionContext` for these lengths, given
    without the arguments it holds."""
    if not isinstance(context, AttentionContext):
        raise TypeError(f"context must be an AttentionContext, got {type(context).__name__}")
    if any(g is not None for g in given):
        raise ValueError(
            "context holds the positions and masks: pass q_positions, k_positions, "
            "key_padding_mask and segment_ids to AttentionContext.build, not with it"
        )
    p = context.positions
    if (p.q_len, p.k_len) != (q.shape[2], k.shape[2]) or p.q.device != q.device:
        raise ValueError(
            f"context is for {p.q_len} queries and {p.k_len} keys on {p.q.device}, but q has "
            f"{q.shape[2]} and k {k.shape[2]} on {q.device}"
        )


def check_softcap(softcap: float | None) -> float | None:
    """Raise unless ``softcap`` is None or a finite number > 0 of a magnitude in
    ``[1 / MAX_FLOAT, MAX_FLOAT]`` (:func:`~posenc.arguments.check_float`)."""
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a number or None, got {type(softcap).__name__}")
    if not math.isfinite(softcap) or softcap <= 0:
        raise ValueError(f"softcap must be a finite number > 0, got {softcap}")
    check_float("softcap", softcap)
    return float(softcap)


def check_sinks(sinks: torch.Tensor | None, heads: int, device: torch.device) -> None:
    """Raise unless ``sinks`` is None or a floating-point ``[heads]`` tensor on ``device``."""
    if sinks is None:
        return
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
        got = sinks.dtype if isinstance(sinks, torch.Tensor) else type(sinks).__name__
        raise TypeError(f"sinks must be a floating-point tensor, got {got}")
    if tuple(sinks.shape) != (heads,):
        raise ValueError(
            f"sinks must be one logit per query head, [{heads}], got {tuple(sinks.shape)}"
        )
    if sinks.device != device:
        raise ValueError(f"sinks is on {sinks.device} but q is on {device}: move sinks there")


def finite(*tensors: torch.Tensor | None) -> bool:
    """Whether every value of the given tensors (None skipped) is finite, read on the host
    once for all of them: else a NaN or infinity in a slot a query may not see would reach
    it through the fused kernels, which add the mask's ``-inf`` to a NaN score and multiply
    a zero probability by a NaN value, and one in a slot it does see would come out of
    them as a zero row (their online softmax drops a NaN maximum) rather than NaN.

    Each tensor's sum is one strided pass, no copy of a cache's slice (``isfinite(v).all()``
    and ``aminmax`` cost 15-50x more on the CPU, torch 2.13), and the sums are read together,
    as they are; NaN and infinities reach the sum, and a sum that overflows only sends the
    call to the explicit path, which is exact too. True where values are not read
    (:func:`~posenc.host_reads.reads_values`: while compiling, where the kernels' own
    behaviour is kept rather than a graph break; with validation off; inside a model's
    layers, whose keys and values :func:`zero_nonfinite` made finite) and on the meta
    device, which holds no values."""
    sums = finite_sums(*tensors)
    return sums is None or all(map(math.isfinite, sums.tolist()))


def finite_sums(*tensors: torch.Tensor | None) -> torch.Tensor | None:
    """What :func:`finite` reads: each tensor's sum (None skipped), ``[n]``, all of them
    finite exactly when the tensors are (unless one overflows); None where values are not
    read. For a caller that reads them with other checks
    (:func:`~posenc.host_reads.batched`)."""
    present = [t for t in tensors if t is not None and not t.is_meta]
    if not present or not reads_values(*present):
        return None
    dtype = math_dtype(present[0].dtype)
    sums = [
        t.sum(dtype=dtype if t.dtype == present[0].dtype else math_dtype(t.dtype)) for t in present
    ]
    if any(s.dtype != sums[0].dtype for s in sums):
        sums = [s.to(torch.float64) for s in sums]
    # each sum read as it is: no sum of the sums to overflow
    return torch.stack(sums)


def zero_nonfinite(x: torch.Tensor) -> torch.Tensor:
    """``x`` with every NaN and infinity replaced by 0, with no host read: how a model's
    layers keep a non-finite key, value or FoX clock of one token from reaching the rows
    that may not see it (a fused kernel adds the mask's ``-inf`` to a NaN score and
    multiplies a zero probability by a NaN value). Finite values pass unchanged (so the
    result is exact wherever the input was finite); the token whose value was not finite
    carries its NaN in its own residual stream. Unchanged with validation off
    (:func:`posenc.set_validation`).

    Shapes:
        x: any -> the same, its dtype.
    """
    if not validation_enabled():
        return x
    # one kernel: NaN, +inf and -inf to 0, every finite value (-0.0 too) as it is
    return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)

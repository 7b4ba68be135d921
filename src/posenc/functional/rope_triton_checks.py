"""What the Triton RoPE entries (:mod:`posenc.functional.rope_triton`) accept, checked
before the kernel runs: a bad argument is a ``TypeError`` (a list, a string, a bool, a
dtype the kernel does not take) or a ``ValueError`` (a shape, a device, a value) that
names the parameter, never Triton's or torch's own error, never a silent cast.

Shapes, dtypes and devices are checked on every call; no value is read on the host here
(this is :mod:`posenc.functional`: pure, no sync). The values that only a host read sees
(the offsets of packed sequences, the slots of a cache) are checked by the entries that
take them from a user, :mod:`posenc.rotary.triton_checks`; the kernel stays inside its
tensors either way (a slot outside the cache is never written).
"""

from __future__ import annotations

import os

import torch

from ..arguments import check_int, check_tensor, check_values
from .rope_triton_launch import DTYPES, triton_available

__all__ = [
    "check_cache",
    "check_cu_seqlens",
    "check_heads",
    "check_kernel_tensor",
    "check_layout",
    "check_offset",
    "check_runs_here",
    "check_slots",
    "check_tables",
    "check_written",
    "runs_on",
]


def runs_on(device: torch.device) -> bool:
    """Whether the Triton kernel runs on ``device``: CUDA, or the CPU under Triton's
    interpreter (``TRITON_INTERPRET=1``)."""
    return device.type == "cuda" or (
        device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
    )


def check_runs_here(t: torch.Tensor, name: str, who: str, advice: str = "") -> None:
    """Raise ``ValueError`` unless the Triton kernel runs on ``t``'s device: CUDA, or the
    CPU under Triton's interpreter (``TRITON_INTERPRET=1``). ``who`` names the caller in
    the message, ``advice`` ends it."""
    device = t.device
    if runs_on(device):
        return
    raise ValueError(
        f"{who} rotates CUDA tensors (or CPU ones under TRITON_INTERPRET=1, set before "
        f"Triton is imported), got {name} on {device}{advice}"
    )


def check_layout(layout: object) -> None:
    """Raise unless Triton is installed and ``layout`` names a pair layout."""
    if not triton_available():
        raise RuntimeError("the Triton RoPE kernel needs Triton (pip install triton)")
    if not isinstance(layout, str) or layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")


def check_kernel_tensor(
    name: str, value: object, kind: str, dims: tuple[int, ...] | None = None
) -> torch.Tensor:
    """``value`` if it is a tensor of ``kind`` (``"int"`` or ``"float"``) with ``dims``
    dimensions (any if None) that holds values (the kernel reads them: not on the meta
    device), or raise (:func:`posenc.arguments.check_tensor`)."""
    check_tensor(name, value, kinds=(kind,), dims=dims)
    assert isinstance(value, torch.Tensor)  # for the type checker: checked above
    check_values(name, value, "the Triton RoPE kernel")
    return value


def check_heads(
    q: object,
    k: object,
    *,
    names: tuple[str, str] = ("q", "k"),
    packed: bool = False,
    k_optional: bool = False,
) -> None:
    """Raise unless q and k (k may be None if ``k_optional``) are ``[batch, heads, seq,
    head_dim]`` tensors (``[total, heads, head_dim]`` when ``packed``) of a dtype the
    kernel turns, on one device, with the same batch, seq and head_dim."""
    shape = "[total, heads, head_dim]" if packed else "[batch, heads, seq, head_dim]"
    for name, t in zip(names, (q, k), strict=True):
        if t is None and k_optional and name == names[1]:
            continue
        t = check_kernel_tensor(name, t, "float")
        if t.dim() != (3 if packed else 4):
            raise ValueError(f"{name} must be a {shape} tensor, got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(
                f"{name} must be float32, bfloat16 or float16 for the Triton kernel (float64 "
                f"stays on the torch path), got {t.dtype}"
            )
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
        return
    same = (q.shape[0], *q.shape[2:]) == (k.shape[0], *k.shape[2:])
    if packed:
        same = q.shape[0] == k.shape[0] and q.shape[2] == k.shape[2]
    if not same:
        raise ValueError(
            f"{names[0]} and {names[1]} must be {shape} with the same "
            f"{'total' if packed else 'batch, seq'} and head_dim, got {tuple(q.shape)} and "
            f"{tuple(k.shape)}"
        )
    if k.device != q.device:
        raise ValueError(
            f"{names[0]} and {names[1]} must be on one device, got {q.device} and {k.device}"
        )


def check_written(name: str, t: torch.Tensor) -> None:
    """Raise unless every element of ``t`` has its own memory: the kernel writes it."""
    if any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride(), strict=True)):
        raise ValueError(
            f"{name} is written in place but its elements share memory (an expanded tensor, "
            f"strides {t.stride()}): pass a tensor of its own (.clone())"
        )


def check_offset(offset: object, rotary_dim: int, head_dim: int, source: str) -> None:
    """Raise unless ``rotary_dim`` channels from ``offset`` fit a head of ``head_dim``."""
    if rotary_dim < 2:
        raise ValueError(f"{source} must turn at least one pair of channels, got none")
    if rotary_dim > head_dim:
        raise ValueError(
            f"{source} must turn rotary_dim <= head_dim ({head_dim}) channels, got "
            f"rotary_dim {rotary_dim}"
        )
    check_int("rotary_offset", offset, minimum=0)
    assert isinstance(offset, int)  # for the type checker: checked above
    if offset > head_dim - rotary_dim:
        raise ValueError(
            f"rotary_offset must be an int in [0, head_dim - rotary_dim = "
            f"{head_dim - rotary_dim}], got {offset!r}"
        )


def check_tables(cos: object, sin: object, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` as ``[batch or 1, seq, n]`` float32 on ``x``'s device, with one
    layout (the kernel reads both by ``cos``'s strides), for ``x`` ``[batch, heads, seq,
    d]`` (from ``[seq, n]``, ``[batch, seq, n]`` or ``[batch or 1, 1, seq, n]``), or
    raise."""
    cos, sin = check_kernel_tensor("cos", cos, "float"), check_kernel_tensor("sin", sin, "float")
    if cos.dtype != torch.float32 or sin.dtype != torch.float32:
        raise TypeError(f"cos and sin must be float32, got {cos.dtype} and {sin.dtype}")
    if cos.dim() == sin.dim() == 4 and cos.shape[1] == sin.shape[1] == 1:
        cos, sin = cos[:, 0], sin[:, 0]
    elif cos.dim() == sin.dim() == 2:
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
    batch, _, seq, head_dim = x.shape
    if (
        cos.dim() != 3
        or cos.shape != sin.shape
        or cos.shape[0] not in (1, batch)
        or cos.shape[1] != seq
        or 2 * cos.shape[2] > head_dim
    ):
        raise ValueError(
            "cos and sin must be float32 [seq, n] or [batch, seq, n] (one rotation for every "
            f"head) with seq = {seq}, batch = {batch} (or 1) and 2n <= {head_dim}, got "
            f"{tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    if cos.requires_grad or sin.requires_grad:
        raise ValueError("cos and sin must not need a gradient: the kernel gives none to them")
    cos, sin = cos.to(x.device), sin.to(x.device)
    if cos.stride() != sin.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    return cos, sin


def check_cu_seqlens(cu_seqlens: object) -> torch.Tensor:
    """``cu_seqlens`` if it is ``[n + 1]`` integers (``n >= 1``), or raise. Its values
    (``0 = c_0 <= ... <= c_n = total``) are not read here:
    :func:`posenc.rotary.triton_checks.check_cu_seqlens_values` reads them."""
    cu = check_kernel_tensor("cu_seqlens", cu_seqlens, "int", (1,))
    if cu.numel() < 2:
        raise ValueError(
            "cu_seqlens must be [n + 1] integers (0, then the ends of the n sequences), got "
            f"shape {tuple(cu.shape)}"
        )
    return cu


def check_cache(name: str, cache: object, new: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``cache`` if it is a ``[batch, kv_heads, max_seq_len, head_dim]`` cache for ``new``
    on ``q``'s device, of a dtype the kernel writes, its elements each in memory of their
    own, or raise."""
    c = check_kernel_tensor(name, cache, "float")
    if c.dtype not in DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {c.dtype}")
    if (
        c.dim() != 4
        or (c.shape[0], c.shape[1], c.shape[3]) != (new.shape[0], new.shape[1], new.shape[3])
        or c.device != q.device
    ):
        raise ValueError(
            f"{name} must be [batch={new.shape[0]}, kv_heads={new.shape[1]}, max_seq_len, "
            f"{new.shape[3]}] on {q.device}, got {tuple(c.shape)} on {c.device}"
        )
    check_written(name, c)
    return c


def check_slots(slots: object, seq: int, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Raise unless ``slots`` are ``[seq]`` integers and ``seq`` new rows fit the caches
    (shape facts). Whether every slot is a row of them is a value, not read here (the
    kernel writes no other row): :func:`posenc.rotary.triton_checks.check_slot_values`
    reads it."""
    t = check_kernel_tensor("slots", slots, "int", (1,))
    if t.shape[0] != seq:
        raise ValueError(f"slots must be [seq = {seq}] integers, got shape {tuple(t.shape)}")
    rows = k_cache.shape[2]
    if v_cache.shape[2] != rows:
        raise ValueError(
            f"k_cache and v_cache must hold as many slots, got {rows} and {v_cache.shape[2]}"
        )
    if seq > rows:
        raise ValueError(f"slots: {seq} new tokens do not fit k_cache and v_cache of {rows} slots")
    if k_cache.numel() and k_cache.data_ptr() == v_cache.data_ptr():
        raise ValueError(
            "k_cache and v_cache must be two tensors: the values would overwrite the keys"
        )

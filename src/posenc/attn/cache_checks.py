"""The checks of a KV cache's arguments (:class:`~posenc.attn.KVCache`,
:class:`~posenc.attn.StaticKVCache`): its per-layer sizes, the keys, values and positions
written into it, and the rule a rolling layer rests on (positions grow). Each raises a
``TypeError`` or ``ValueError`` that names the argument; shape, dtype and device checks
read no value, and value checks go through :mod:`posenc.host_reads` (one read with the
rest of a forward's, none with validation off)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..arguments import check_dtype
from ..config import MAX_INT, check_int
from ..host_reads import read, reads_values
from ..positions.checks import check_positions
from ..positions.padding import check_padding_mask, check_segment_ids

__all__ = [
    "check_cache_fits",
    "check_delta",
    "check_growing",
    "check_joint",
    "check_key_masks",
    "check_layers",
    "check_new",
    "check_new_positions",
    "per_layer",
]


def check_delta(delta: Any, batch: int, device: torch.device) -> int | torch.Tensor:
    """A shift of the cached positions as the cache adds it (an int, or ``[1 | batch, 1]``
    int64), or a ``TypeError``/``ValueError`` naming ``delta``: an int, or an integer
    tensor ``[]``, ``[batch]`` or ``[batch, 1]`` on ``device``. Its values are not read."""
    if not isinstance(delta, torch.Tensor):
        check_int("delta", delta, minimum=-MAX_INT)
        return delta
    if delta.dtype == torch.bool or delta.is_floating_point() or delta.is_complex():
        raise TypeError(f"delta must be an int or an integer tensor, got {delta.dtype}")
    if delta.shape not in ((), (batch,), (batch, 1)):
        raise ValueError(
            f"delta must be an int, a 0-d tensor or one per row, [batch={batch}], got shape "
            f"{tuple(delta.shape)}"
        )
    if delta.device != device:
        raise ValueError(f"delta is on {delta.device} but the cache is on {device}: move it there")
    return delta.long().view(-1, 1)  # [1 | batch, 1]


def check_cache_fits(
    layers: Sequence[tuple[torch.Tensor, torch.Tensor, int | None]],
    held: tuple[torch.dtype, torch.device],
    kv_heads: int,
    head_dim: int,
    key_dims: Sequence[int],
    keep: Sequence[int | None],
    dtype: torch.dtype,
    device: torch.device,
) -> None:
    """:meth:`KVCache.check_fits <posenc.attn.KVCache.check_fits>` (see there): raise a
    ``ValueError`` naming what differs unless the cache's ``layers`` (each its keys'
    buffer, its values' and how many keys it keeps, None: all) and what it ``held``
    (dtype, device) fit a model's layers. Shapes only."""
    check_int("kv_heads", kv_heads)
    check_int("head_dim", head_dim)
    if not isinstance(key_dims, (list, tuple)):
        raise TypeError(f"key_dims must be a list or tuple, one width per layer, got {key_dims!r}")
    key_dims = per_layer("key_dims", key_dims, len(key_dims), 1, minimum=1, optional=False)
    keep = per_layer("keep", keep, len(key_dims), None, minimum=0, optional=True)
    check_dtype("dtype", dtype, floating=False)
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device, got {device!r}")
    fix = "make one with model.new_cache(batch, max_seq_len)"
    if len(layers) != len(key_dims):
        raise ValueError(
            f"cache has n_layers={len(layers)} but the model has {len(key_dims)}: {fix}"
        )
    for i, (k, v, kept) in enumerate(layers):
        got = (k.shape[1], k.shape[-1], v.shape[-1])
        if got != (kv_heads, key_dims[i], head_dim):
            raise ValueError(
                f"cache layer {i} holds kv_heads={got[0]}, key width {got[1]} and "
                f"head_dim={got[2]}, but the model's layer {i} has kv_heads={kv_heads}, "
                f"key width {key_dims[i]} and head_dim={head_dim}: {fix}"
            )
        needed = keep[i]
        if kept is not None and (needed is None or kept < needed):
            raise ValueError(
                f"cache layer {i} keeps its last {kept} keys but the model's layer {i} "
                f"needs {'all of them' if needed is None else f'its last {needed}'}: {fix}"
            )
    if held != (dtype, device):
        raise ValueError(
            f"cache holds {held[0]} on {held[1]} but the model is {dtype} on {device}: {fix}"
        )


def per_layer(
    name: str, value: Any, n_layers: int, default: int | None, *, minimum: int, optional: bool
) -> list[Any]:
    """``value``, one entry per layer, as a list (``default`` in every layer for None), or
    a ``TypeError``/``ValueError`` naming ``name``: a list or tuple of ``n_layers`` ints
    ``>= minimum`` (or None, where ``optional``)."""
    if value is None:
        return [default] * n_layers
    entry = "an int" + (" or None" if optional else "")
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{name} must be a list or tuple of one entry per layer (n_layers={n_layers}), "
            f"{entry} each, got {type(value).__name__} ({value!r})"
        )
    if len(value) != n_layers:
        raise ValueError(f"{name} must give one entry per layer ({n_layers}), got {len(value)}")
    for i, n in enumerate(value):
        if n is not None or not optional:
            check_int(f"{name}[{i}]", n, minimum=minimum)
    return list(value)


def check_new(name: str, new: Any, buffer: torch.Tensor, n: int | None, layer: int) -> None:
    """Raise unless ``new`` can be written into ``buffer`` (``[batch, heads, slots,
    width]``) as ``layer``'s new ``name``: a ``[batch, heads, n, width]`` tensor (``n``
    any where None) of the buffer's dtype, on its device. No value is read."""
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(new).__name__}")
    if new.dtype != buffer.dtype:
        raise TypeError(
            f"{name} must be {buffer.dtype}, the cache's dtype (nothing is cast), got {new.dtype}"
        )
    if new.device != buffer.device:
        raise ValueError(
            f"{name} is on {new.device} but the cache is on {buffer.device}: move {name} there"
        )
    b, h, _, width = buffer.shape
    length = "n" if n is None else f"n={n} (as k)"
    if (
        new.dim() != 4
        or (new.shape[0], new.shape[1], new.shape[3]) != (b, h, width)
        or (n is not None and new.shape[2] != n)
    ):
        raise ValueError(
            f"{name} must be [batch={b}, kv_heads={h}, {length}, {width}] for layer {layer} "
            f"of this cache, got shape {tuple(new.shape)}"
        )


def check_joint(kv: Any, values: torch.Tensor) -> None:
    """Raise unless ``kv`` can be a layer's keys and values side by side
    (:meth:`~posenc.attn.KVCache.update_joint`), ``values`` its values' buffer: a ``[batch,
    2 · kv_heads, n, width]`` tensor of the buffer's dtype on its device (its halves are
    then checked as keys and values). No value is read."""
    if not isinstance(kv, torch.Tensor):
        raise TypeError(f"kv must be a torch.Tensor, got {type(kv).__name__}")
    if kv.dim() != 4 or kv.shape[1] % 2:
        raise ValueError(
            "kv must be [batch, 2 * kv_heads, n, head_dim] (the keys' heads, then the values'), "
            f"got shape {tuple(kv.shape)}"
        )
    if kv.dtype != values.dtype:
        raise TypeError(
            f"kv must be {values.dtype}, the cache's dtype (nothing is cast), got {kv.dtype}"
        )
    if kv.device != values.device:
        raise ValueError(f"kv is on {kv.device} but the cache is on {values.device}: move kv there")


def check_new_positions(positions: Any, batch: int, device: torch.device) -> torch.Tensor:
    """The new tokens' ``positions`` as the cache stores them, ``[batch, n]`` int64, or a
    ``TypeError``/``ValueError`` naming them: an integer tensor ``[n]`` or ``[1 | batch,
    n]`` on ``device``, ``>= 0`` (a value check: :func:`~posenc.positions.check_positions`).
    """
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    if positions.is_floating_point():
        raise TypeError(f"KVCache stores integer positions, got {positions.dtype}")
    positions = check_positions(positions, integer=True, device=device)
    rows = positions.shape[0]
    if positions.dim() == 2 and rows != 1 and rows != batch:
        raise ValueError(f"positions has batch size {rows} but the cache holds {batch} sequences")
    return positions.expand(batch, positions.shape[-1])


def check_key_masks(
    real: Any, segments: Any, batch: int, length: int, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``real`` (the padding mask of every key: True or 1 for a real token) as bool and
    ``segments`` (their document ids), each None or ``[batch, length]`` on ``device``
    (:func:`~posenc.positions.check_padding_mask`, :func:`~posenc.positions.
    check_segment_ids`), or a ``TypeError``/``ValueError`` naming the argument. A bool
    mask's values are not read (an integer one's are, to be 0 or 1)."""
    checked = []
    for name, value, check in (
        ("real", real, check_padding_mask),
        ("segments", segments, check_segment_ids),
    ):
        if value is not None:
            value = check(value, name)
            if tuple(value.shape) != (batch, length) or value.device != device:
                raise ValueError(
                    f"{name} must be [batch, length] = [{batch}, {length}] (every key, the new "
                    f"ones included) on {device}, got shape {tuple(value.shape)} on "
                    f"{value.device}"
                )
        checked.append(value)
    return checked[0], checked[1]


def check_growing(positions: torch.Tensor, linked: torch.Tensor | None) -> None:
    """Raise unless ``positions`` ``[batch, n]`` grow from each token to the next where
    ``linked`` ``[batch, n - 1]`` (None: everywhere): what a rolling layer needs (a
    value check, read with the forward's others)."""
    if positions.shape[-1] < 2 or not reads_values(positions):
        return
    grows = positions.diff(dim=-1) > 0
    if linked is not None:
        grows = grows | ~linked
    read(grows.all().view(1), _check_grows)


def _check_grows(values: list[int]) -> None:
    if not values[0]:
        raise ValueError(
            "a rolling cache (a layer with a window or chunk keeps only its last keys) needs "
            "positions that grow by at least one per token within a document; these do not: "
            "build the cache with keep=None to keep every key"
        )


def check_layers(layers: Any, n_layers: int) -> list[int]:
    """``layers`` (None: all) as a list of distinct layer indices, or a
    ``TypeError``/``ValueError`` naming it."""
    if layers is None:
        return list(range(n_layers))
    if not isinstance(layers, Sequence) or isinstance(layers, (str, bytes)):
        raise TypeError(
            f"layers must be a list or tuple of layer indices (or None for all), got "
            f"{type(layers).__name__} ({layers!r})"
        )
    chosen = list(layers)
    for i, layer in enumerate(chosen):
        check_int(f"layers[{i}]", layer, minimum=0, maximum=n_layers - 1)
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"layers must name each layer once, got {chosen}")
    return chosen

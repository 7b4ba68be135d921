"""The buffers a KV cache holds per layer: keys and values, side by side in one tensor
where a layer can (:func:`layer_buffers`), which a model's layer then writes in one copy
(:func:`write_joint`). A decode step of a small model costs its host a few microseconds per
kernel, and two writes and two reads of a layer's keys and values became one and one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["layer_buffers", "write_joint"]


def layer_buffers(
    batch: int,
    kv_heads: int,
    head_dim: int,
    slots: Sequence[int],
    key_dims: Sequence[int],
    joinable: Sequence[bool],
    device: torch.device | None,
    dtype: torch.dtype,
) -> tuple[list[torch.Tensor], list[torch.Tensor], dict[int, torch.Tensor]]:
    """``(keys, values, joint)``: per layer zeroed keys ``[batch, kv_heads, slots[layer],
    key_dims[layer]]`` and values ``[batch, kv_heads, slots[layer], head_dim]``; where
    ``joinable[layer]`` and the keys are as wide as the values, both are views of one
    buffer ``joint[layer]``, ``[batch, 2 · kv_heads, slots, head_dim]``, keys' heads first.

    Example:
        >>> keys, values, joint = layer_buffers(1, 2, 4, [8, 3], [4, 4], [True, False],
        ...                                     torch.device("cpu"), torch.float32)
        >>> sorted(joint), tuple(keys[0].shape), keys[0]._base is joint[0]
        ([0], (1, 2, 8, 4), True)
    """
    keys, values, joint = [], [], {}
    for layer, (n, width, join) in enumerate(zip(slots, key_dims, joinable, strict=True)):
        if join and width == head_dim:
            both = torch.zeros(batch, 2 * kv_heads, n, head_dim, device=device, dtype=dtype)
            joint[layer] = both
            keys.append(both[:, :kv_heads])
            values.append(both[:, kv_heads:])
        else:
            keys.append(torch.zeros(batch, kv_heads, n, width, device=device, dtype=dtype))
            values.append(torch.zeros(batch, kv_heads, n, head_dim, device=device, dtype=dtype))
    return keys, values, joint


def write_joint(
    both: torch.Tensor, kv: torch.Tensor, start: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``kv`` written into ``both`` from slot ``start``, and the keys and values of every
    slot up to its last, as views.

    Shapes:
        both ``[batch, 2 · kv_heads, slots, head_dim]``, kv ``[batch, 2 · kv_heads, n,
        head_dim]`` -> keys, values ``[batch, kv_heads, start + n, head_dim]``.
    """
    n = kv.shape[2]
    both.narrow(2, start, n).copy_(kv)
    heads = both.shape[1] // 2
    k, v = both.narrow(2, 0, start + n).split_with_sizes((heads, heads), dim=1)
    return k, v

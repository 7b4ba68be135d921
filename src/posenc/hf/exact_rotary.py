"""A loaded transformers model's rotary embedding, computed by posenc: exact tables inside
the model people already run.

transformers' rotary embeddings (``LlamaRotaryEmbedding`` and the two hundred like it) give
``(cos, sin)`` of the ``position_ids``, ``[batch, seq, rotary_dim]`` in the input's dtype,
from angles computed in float32 (``position * inv_freq``), whose error grows with the
position: 1.3e-4 at 1,024 positions, 6.3e-3 at 32,768 and 0.03 at 131,072 (head 128, base
1e4; ``docs/huggingface.md``). :class:`ExactRotaryEmbedding` gives the same tensors from
posenc's reading of the model's config (:func:`~posenc.hf.rope.rope_from_hf_config`: the
same frequencies, scaling and attention factor), with angles in float64, within 6e-7 of
exact at every position.

Nothing is assumed of the module it replaces: :meth:`ExactRotaryEmbedding.fit` calls it on
the first positions of every layer type it has and keeps the form of its tables
(:data:`FORMATS`) that reproduces it, and refuses by name a module that no form reproduces
(a model posenc reads another way). M-RoPE (Qwen2-VL and its successors) takes transformers'
``[3, batch, seq]`` positions (or ``[batch, seq]`` text positions, the same on every axis)
and gives the tables of its sections merged, as transformers' module does.

Shapes:
    x ``[batch, seq, ...]`` (its dtype and device), position_ids ``[batch, seq]`` ->
    cos, sin ``[batch, seq, rotary_dim]`` (or ``[batch, seq, rotary_dim / 2]``, or one
    complex tensor: the replaced module's form).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from ..rotary import RoPE
from ..rotary.dca import DualChunkRoPE
from ..rotary.mrope import MRoPE
from .rope import rope_from_hf_config

__all__ = ["FORMATS", "ExactRotaryEmbedding", "widen"]

#: the forms of a rotary embedding's tables of ``n`` frequencies: ``"cat"``, ``(cos, sin)``
#: of ``2 n`` columns, the frequencies then again (Llama's ``cat((freqs, freqs))``);
#: ``"interleave"``, each one twice in a row (Cohere's ``repeat_interleave``); ``"half"``,
#: ``n`` columns (gpt-oss); ``"complex"``, one tensor ``cos + i sin`` (Llama 4's ``polar``)
FORMATS = ("cat", "interleave", "half", "complex")
#: positions the fit compares at most (fewer where the config's context is shorter)
FIT_POSITIONS = 256


def widen(cos: torch.Tensor, sin: torch.Tensor, form: str) -> tuple[torch.Tensor, ...]:
    """The tables of ``n`` frequencies in the form ``form`` (one of :data:`FORMATS`).

    Shapes:
        ``[..., n]`` -> ``([..., 2 n], [..., 2 n])``, ``([..., n], [..., n])`` (``"half"``)
        or ``([..., n],)`` complex (``"complex"``).
    """
    if form == "cat":
        return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    if form == "interleave":
        return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    if form == "half":
        return cos, sin
    return (torch.complex(cos, sin),)


class ExactRotaryEmbedding(nn.Module):
    """A transformers rotary embedding (its ``forward(x, position_ids[, layer_type])``)
    computed from posenc's RoPE of the model's config, one per layer type.

    Made by :meth:`fit`, which checks it against the module it replaces.

    Args:
        ropes: the RoPE of each layer type (the key None: a module without layer types).
        forms: the column order of each (:data:`FORMATS`).
    """

    def __init__(self, ropes: dict[str | None, RoPE], forms: dict[str | None, str]) -> None:
        super().__init__()
        self._types = list(ropes)
        self.ropes = nn.ModuleList(ropes.values())
        self.forms = dict(forms)

    @classmethod
    def fit(cls, original: nn.Module, config: Any) -> ExactRotaryEmbedding:
        """The exact embedding of ``original`` (a loaded model's rotary embedding) from
        ``config`` (the config it reads: its own ``config`` attribute), checked to give
        ``original``'s tables on the first positions of every layer type.

        Raises:
            ValueError: posenc reads the config as dual-chunk attention, or no form of
                table reproduces ``original`` (both named).
        """
        name = type(original).__name__
        types = list(getattr(original, "layer_types", None) or [None])
        ropes = {t: rope_from_hf_config(config, layer_type=t) for t in types}
        for rope in ropes.values():
            if isinstance(rope, DualChunkRoPE):
                raise ValueError(
                    f"{name}: posenc reads this config as dual chunk attention, which turns "
                    "q and k inside its attention, not by tables: exact rotary is not offered "
                    "(apply(model, rotary=None) keeps the model's own)"
                )
        limit = getattr(config, "max_position_embeddings", None) or FIT_POSITIONS
        device = next((b.device for b in original.buffers()), torch.device("cpu"))
        reference = _as_built(original, config)
        on = next((b.device for b in reference.buffers()), torch.device("cpu"))
        n = min(FIT_POSITIONS, limit)
        x = torch.zeros(1, dtype=torch.float32, device=on)
        forms = {}
        for t in types:
            positions = torch.arange(n, device=on)[None]  # [1, n]
            if isinstance(ropes[t], MRoPE):  # [3, 1, n], a different position per axis
                positions = torch.stack([positions * k % n for k in (1, 2, 3)])
            forms[t] = _form(name, reference, ropes[t], t, x, positions)
        return cls(ropes, forms).to(device)

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None
    ) -> Any:
        """``(cos, sin)`` of ``position_ids`` for ``layer_type``'s RoPE in ``x``'s dtype, or
        the complex table (the replaced module's form: Llama 4's, complex64).

        Shapes:
            position_ids ``[batch, seq]`` -> ``[batch, seq, rotary_dim]`` each.
        """
        if layer_type not in self.forms:
            raise ValueError(f"layer_type must be one of {self._types}, got {layer_type!r}")
        form = self.forms[layer_type]
        rope = cast(RoPE, self.ropes[self._types.index(layer_type)])
        if isinstance(rope, MRoPE) and position_ids.dim() == 2:  # text: every axis alike
            position_ids = position_ids.expand(3, -1, -1)
        cos, sin = rope.rotation(position_ids)[:2]
        tables = widen(cos, sin, form)
        if form == "complex":
            return tables[0]
        return tables[0].to(x.dtype), tables[1].to(x.dtype)

    def extra_repr(self) -> str:
        return ", ".join(f"{t or 'every layer'}: {f}" for t, f in self.forms.items())


def _as_built(original: nn.Module, config: Any) -> nn.Module:
    """``original`` as transformers builds it from ``config``, on the CPU in float32: a model
    moved with ``.to(torch.bfloat16)`` rounds its rotary module's frequency buffers, which
    the exact tables do not reproduce (nor should); ``original`` itself where its class
    cannot be built again from the config alone."""
    try:
        return type(original)(config)
    except Exception:  # another constructor: the module as it is
        return original


def _form(
    name: str,
    original: nn.Module,
    rope: RoPE,
    layer_type: str | None,
    x: torch.Tensor,
    positions: torch.Tensor,
) -> str:
    """The column order in which ``rope``'s tables equal ``original``'s on ``positions``
    (float32 angles against float64 ones: a position's error is about ``p · 2^-23`` at
    frequency 1, far below a wrong order's or frequency's)."""
    with torch.no_grad():
        args = (x, positions) if layer_type is None else (x, positions, layer_type)
        given = original(*args)
        theirs = (given,) if isinstance(given, torch.Tensor) else tuple(given)
        ours = rope.rotation(positions)
    scale = max(1.0, max(float(t.abs().max()) for t in theirs))
    tol = 1e-6 * (positions.shape[-1] + 1) * scale
    worst, shapes = float("inf"), [tuple(t.shape) for t in theirs]
    for form in FORMATS:
        wide = widen(ours[0], ours[1], form)
        if [tuple(t.shape) for t in wide] != shapes or wide[0].dtype.is_complex != theirs[
            0
        ].dtype.is_complex:
            continue
        error = max(
            float((w - t.to(w.dtype)).abs().max()) for w, t in zip(wide, theirs, strict=True)
        )
        if error <= tol:
            return form
        worst = min(worst, error)
    where = "" if layer_type is None else f" (layer type {layer_type!r})"
    raise ValueError(
        f"{name}{where}: posenc's RoPE of this config does not reproduce its tables "
        f"(closest {worst:.2e} over {positions.shape[-1]} positions, tolerance {tol:.1e}, "
        f"shapes {shapes}); exact rotary is not applied to it"
    )

"""RoPE (Su et al. 2021, arXiv:2104.09864) with every context-extension scaling.

The scaling is a Hugging Face ``rope_parameters`` dict, accepted verbatim
(:mod:`posenc.functional.rope_scaling` lists the types and their formulas,
:mod:`posenc.rotary.scaling` their parameters).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from ..base import RotaryConfig, RotaryEncoding
from ..config import MAX_POSITION, check_choice, check_device, check_float, check_int
from ..functional.rope import (
    ROPE_LAYOUTS,
    ROTARY_AT,
    narrow_tables,
    rope_cos_sin,
    rotary_offset,
    widen_tables,
)
from ..functional.rope_kernel import (
    check_rope_kernel,
    rotate_checked,
    rotate_heads_checked,
    rotate_pair_checked,
)
from ..registry import register
from .inputs import check_rotate
from .scaling import ScalingConfig, parse_scaling
from .tables import RopeTables, WideTables, cacheable

__all__ = ["RoPE"]

DEFAULT_BASE = 10000.0


def _odd_fraction(name: str, factor: float, head_dim: int) -> str:
    """The message for a fraction of the head that rotates no whole number of pairs."""
    valid = [f"{n / head_dim:g}" for n in range(2, head_dim + 1, 2)]
    shown = valid if len(valid) <= 6 else [*valid[:3], "...", *valid[-2:]]
    return (
        f"{name}={factor} of head_dim={head_dim} rotates int({head_dim} * {factor}) = "
        f"{int(head_dim * factor)} dimensions, but they come in pairs (an even number, at "
        f"least 2): {name} must be (an even number of dimensions) / head_dim, one of "
        f"{', '.join(shown)} for head_dim={head_dim}"
    )


def check_seq_len(seq_len: int | None) -> None:
    """Raise naming ``seq_len`` unless it is None or an int in ``[1, MAX_POSITION]`` (a
    length as long as positions go; a symbolic one, under ``torch.export``, passes)."""
    if seq_len is not None and not isinstance(seq_len, torch.SymInt):
        check_int("seq_len", seq_len, maximum=MAX_POSITION)


@dataclasses.dataclass(frozen=True)
class RopeConfig(RotaryConfig):
    """Configuration of :class:`RoPE`.

    Attributes:
        head_dim: size of each attention head (even).
        base: the wavelength base θ (``rope_theta``); default 10000, or the ``rope_theta``
            of ``scaling``.
        layout: ``"half"`` (NeoX/Llama pairs i, i + d/2; the default, as in Hugging Face)
            or ``"interleaved"`` (GPT-J/RoFormer/Meta pairs 2i, 2i + 1). Never guessed.
        scaling: a Hugging Face ``rope_parameters`` dict, e.g. ``{"rope_type": "yarn",
            "factor": 4.0, "original_max_position_embeddings": 2048}``; after validation a
            parameter record (:class:`~posenc.rotary.scaling.ScalingConfig`).
        partial_rotary_factor: fraction of each head that rotates (Hugging Face's name).
        rotary_dim: how many leading dimensions of each head rotate (GPT-NeoX's name);
            resolved from ``partial_rotary_factor`` when that is given.
        rotary_at: where the rotary channels sit in each head: ``"start"`` (the first
            ``rotary_dim``: GPT-NeoX, Llama, Phi) or ``"end"`` (the last: DeepSeek-V4's
            heads, nope channels then rope ones). Never guessed.
        kernel: ``"auto"`` (the compiled torch path where it pays, the reference
            elsewhere) or ``"triton"`` (the Triton kernel, q and k in one launch: CUDA
            tensors of float32/bfloat16/float16; ``docs/gpu.md``). Never chosen for you.
    """

    head_dim: int
    base: float | None = None
    layout: str = "half"
    scaling: Any = None
    partial_rotary_factor: float | None = None
    rotary_dim: int | None = None
    rotary_at: str = "start"
    kernel: str = "auto"

    #: the name of the fraction that rotates, as errors name it (P-RoPE's is ``p``)
    fraction_name: ClassVar[str] = "partial_rotary_factor"

    def __post_init__(self) -> None:
        check_int("head_dim", self.head_dim, minimum=2, even=True)
        check_choice("layout", self.layout, ROPE_LAYOUTS)
        check_choice("rotary_at", self.rotary_at, ROTARY_AT)
        check_rope_kernel(self.kernel)
        record, from_scaling = parse_scaling(self.scaling)
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "scaling", record)
        for key, name in (
            ("rope_theta", "base"),
            ("partial_rotary_factor", "partial_rotary_factor"),
        ):
            if key in from_scaling:
                ours, theirs = getattr(self, name), from_scaling[key]
                if ours is not None and ours != theirs:
                    raise ValueError(f"{name}={ours} conflicts with scaling {key}={theirs}")
                set_(self, name, theirs)
        base = DEFAULT_BASE if self.base is None else self.base
        set_(self, "base", base)
        check_float("base", base)
        if base <= 1:
            raise ValueError(f"base must be > 1, got {base}")
        rotary_dim, factor = self.rotary_dim, self.partial_rotary_factor
        if factor is not None:
            check_float("partial_rotary_factor", factor)
            if factor > 1:
                raise ValueError(f"partial_rotary_factor must be in (0, 1], got {factor}")
            derived = int(self.head_dim * factor)
            if rotary_dim is not None and rotary_dim != derived:
                raise ValueError(
                    f"rotary_dim={rotary_dim} conflicts with partial_rotary_factor={factor} "
                    f"(head_dim * factor = {derived})"
                )
            if derived < 2 or derived % 2:
                raise ValueError(_odd_fraction(self.fraction_name, factor, self.head_dim))
            rotary_dim = derived
        if rotary_dim is None:
            rotary_dim = self.head_dim
        set_(self, "rotary_dim", rotary_dim)
        check_int("rotary_dim", rotary_dim, minimum=2, even=True)
        if rotary_dim > self.head_dim:
            raise ValueError(f"rotary_dim ({rotary_dim}) exceeds head_dim ({self.head_dim})")
        # the scaling's own checks against the sizes (NTK needs d > 2, LongRoPE one factor
        # per pair) run now, at creation, not at the first forward
        record.inv_freq(self.head_dim, rotary_dim, base, device="cpu")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["scaling"] = self.scaling.to_dict()
        return out


@register(
    "rope",
    trainable=False,
    relative=True,
    extrapolates=True,
    reference="Su et al. 2021, RoFormer, arXiv:2104.09864",
    summary="rotates query/key pairs by position-proportional angles; scores see n - m only",
    formula=(
        "pair i of q and k at position m turns by m·θ_i:  (a, b) ↦ (a·cos m·θ_i − b·sin m·θ_i,\n"
        "a·sin m·θ_i + b·cos m·θ_i),  θ_i = base^(−2i/r), i < r/2, r = rotary_dim (head_dim)\n"
        'pair i = dims (i, i + r/2) in layout "half", (2i, 2i + 1) in "interleaved"; scaling\n'
        "rescales θ_i (and cos, sin by an attention factor);  q'_m·k'_n depends on n − m only"
    ),
)
class RoPE(RotaryEncoding):
    """Rotary position embedding, with optional context-extension scaling.

    The cos/sin of the angles are computed from the positions in float64, rounded once to
    float32. Those of the default positions (none given) come from a table made once per
    device by that same computation and grown by length (:mod:`posenc.rotary.tables`):
    kept out of the ``state_dict``, so ``model.to(torch.bfloat16)`` cannot round it, and
    dropped by ``.to()`` or a new config, so it cannot go stale.

    Shapes:
        q ``[batch, heads, seq, head_dim]``, k ``[batch, kv_heads, seq, head_dim]``,
        positions ``[seq]`` or ``[batch, seq]`` -> rotated q, k of the same shapes.

    Example:
        >>> import torch, posenc
        >>> rope = posenc.create("rope", head_dim=64, scaling={"rope_type": "yarn",
        ...     "factor": 4.0, "original_max_position_embeddings": 2048})
        >>> q = k = torch.randn(1, 8, 10, 64)
        >>> q2, k2 = rope(q, k)
        >>> torch.allclose(q2.norm(dim=-1), q.norm(dim=-1) * rope.attention_factor())
        True
    """

    Config = RopeConfig
    config: RopeConfig
    #: how many tables :meth:`rotation` returns (``cos, sin``; xPos adds ``scale``)
    rotation_tables: ClassVar[int] = 2

    def __init__(self, config: RopeConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        #: how many pairs of each head turn: the width ``n`` of :meth:`rotation`'s cos and
        #: sin (``rotary_dim // 2``; ``head_dim // 2`` for ``proportional`` scaling), known
        #: once here so that checking a rotation reads no table (nor breaks a compiled graph)
        self._pairs = int(self.inv_freq(device="cpu").numel())
        self._tables = RopeTables()
        #: whether :meth:`rotation` is RoPE's own (xPos adds a table, M-RoPE and DCA place
        #: positions their way): only then do the cached tables serve default positions
        self._tabled = type(self).rotation is RoPE.rotation
        #: whether :meth:`rotate` is RoPE's own (xPos scales queries and keys apart): only
        #: then are q and k turned in one pass
        self._paired = type(self).rotate is RoPE.rotate

    def _apply(self, fn, recurse=True):
        self._tables.clear()  # .to(), .cuda(), .half(): the next call makes its table there
        return super()._apply(fn, recurse)

    @property
    def scaling(self) -> ScalingConfig:
        return self.config.scaling

    @property
    def depends_on_length(self) -> bool:
        return self.scaling.depends_on_length

    def inv_freq(
        self, seq_len: int | None = None, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """The per-pair frequencies (float64) at ``seq_len``. Shapes: ``[rotary_dim // 2]``."""
        check_seq_len(seq_len)
        return self._frequencies(seq_len, check_device(device))[0]

    def attention_factor(self, seq_len: int | None = None) -> float:
        """The factor multiplying cos and sin (the logits scale by its square)."""
        check_seq_len(seq_len)
        return self._frequencies(seq_len, "cpu")[1]

    def _frequencies(self, seq_len, device) -> tuple[torch.Tensor, float]:
        c = self.config
        return c.scaling.inv_freq(c.head_dim, c.rotary_dim, c.base, seq_len, device)

    def rotation(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """``(cos, sin)`` of every position's angles, float32, ``positions.shape + (n,)``
        (subclasses may add tables: xPos's ``scale``)."""
        positions = self.check_positions(positions)
        check_seq_len(seq_len)
        if seq_len is None and self.scaling.depends_on_length:
            if torch.compiler.is_compiling():
                raise ValueError(f"{self.scaling.rope_type!r} scaling needs seq_len under compile")
            seq_len = int(positions.max()) + 1 if positions.numel() else 1  # none: any length
        return self._cos_sin(positions, seq_len)

    def _cos_sin(
        self, positions: torch.Tensor, seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`rotation` of checked ``positions`` (``seq_len`` resolved)."""
        inv_freq, attention_factor = self._frequencies(seq_len, positions.device)
        return rope_cos_sin(positions, inv_freq, attention_factor)

    def _default_rotation(
        self, seq_len: int, device: torch.device | None, offset: int, total_len: int | None
    ) -> tuple[torch.Tensor, ...]:
        """``(cos, sin)`` of positions ``offset .. offset + seq_len - 1`` (checked): views of
        this RoPE's table on ``device`` (read them, do not write them), made once
        (:mod:`posenc.rotary.tables`) and equal to :meth:`rotation` of those positions;
        computed as :meth:`rotation` computes where no table serves."""
        wide = self._table_rows(offset, seq_len, device)
        if wide is None:
            return super()._default_rotation(seq_len, device, offset, total_len)
        return narrow_tables(*wide, self.config.layout)

    def _table_rows(
        self, offset: int, seq_len: int, device: torch.device | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Rows ``offset .. offset + seq_len - 1`` of the widened table
        (:func:`~posenc.functional.rope.widen_tables`), or None where no table serves: a
        length-dependent scaling, past ``TABLE_LIMIT``, a trace, a subclass's own
        rotation."""
        if not self._tabled or self.config.scaling.depends_on_length or not cacheable():
            return None
        place = torch.device("cpu") if device is None else device
        return self._tables.rows(self.config, offset, seq_len, place, self._wide_cos_sin)

    def _wide_cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`~posenc.functional.rope.widen_tables` of :meth:`rotation` of checked
        ``positions`` (what the table holds)."""
        return widen_tables(*self._cos_sin(positions), self.config.layout)

    def _layer_rotation(
        self, seq_len: int, device: torch.device | None, offset: int
    ) -> tuple[torch.Tensor, ...]:
        """The table's widened rows (:class:`~posenc.rotary.tables.WideTables`) where they
        serve and :meth:`_rotate_pair` turns by them (``kernel="auto"``, RoPE's own
        rotation); :meth:`default_rotation`'s ``(cos, sin)`` elsewhere (the Triton kernel
        that writes a static cache takes those)."""
        if self._paired and self.config.kernel == "auto":
            wide = self._table_rows(offset, seq_len, device)
            if wide is not None:
                return WideTables(*wide)
        return super()._layer_rotation(seq_len, device, offset)

    def _rotate_default(
        self, q: torch.Tensor, k: torch.Tensor, offset: int, total_len: int | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k of a forward at the default positions, turned by the widened table's
        rows in one pass where it serves."""
        wide = None if offset or not self._paired else self._table_rows(0, k.shape[2], q.device)
        if wide is None:
            return super()._rotate_default(q, k, offset, total_len)
        return self._rotate_pair(q, k, WideTables(*wide))

    def rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool = False
    ) -> torch.Tensor:
        """``x`` turned by ``rotation`` (``key`` changes nothing for RoPE, but must be a
        bool).

        Shapes:
            x ``[batch, heads, seq, head_dim]``, rotation this RoPE's ``(cos, sin)`` of
            ``x``'s positions (``[seq, n]`` or ``[batch or 1, seq, n]``) -> the same as x,
            its dtype.

        Raises:
            TypeError: x not a floating-point tensor, rotation not a tuple of
                floating-point tensors, key not a bool, named.
            ValueError: x not ``head_dim`` wide, or a rotation of another RoPE (another
                number of pairs or tables) or of other positions (another length or
                batch), named.
        """
        cos, sin = self._check_rotate(x, rotation, key)
        return self._turn(x, cos, sin)

    def rotate_back(self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """``x`` turned by the opposite angles: the conjugate rotation (cos, −sin, the
        attention factor kept), which DeepSeek-V4 applies to its attention output at the
        query's position (its values carry the keys' rotation); the inverse of
        :meth:`rotate` when the attention factor is 1.

        Shapes and errors: as :meth:`rotate`.
        """
        cos, sin = self._check_rotate(x, rotation, False)
        return self._turn(x, cos, -sin)

    def _check_rotate(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...], key: bool
    ) -> tuple[torch.Tensor, ...]:
        """``rotation``'s tables, or a ``TypeError``/``ValueError`` naming the argument
        unless ``x`` is ``[batch, heads, seq, head_dim]`` floating point and ``rotation``
        is what :meth:`rotation` returns for its positions (``(cos, sin)``, xPos's ``(cos,
        sin, scale)``: each ``[seq, n]`` or ``[batch or 1, seq, n]``): shapes only, no
        table is read, so it costs nothing on the hot path nor breaks a compiled graph."""
        if type(rotation) is WideTables:  # a model's layer rotation: its (cos, sin) as views
            rotation = narrow_tables(*rotation, self.config.layout)
        tables = (None,) * self.rotation_tables
        return check_rotate(self, x, rotation, key, width=self._pairs, heads=tables)

    def _turn(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``x``'s rotary channels (the first or the last ``2 · cos.shape[-1]``) turned."""
        c = self.config
        offset = rotary_offset(c.rotary_at, x.shape[-1], cos.shape[-1])
        return rotate_checked(x, cos, sin, c.layout, c.kernel, offset)

    def rotate_pair(
        self, q: torch.Tensor, k: torch.Tensor, rotation: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k turned by the same tables: one launch of the Triton kernel for both with
        ``kernel="triton"``, one pass over both for small tensors, the compiled kernel on
        each otherwise; checked as :meth:`rotate` checks, q and k by their names."""
        self._check_heads("q", q)
        self._check_heads("k", k)
        if q.device != k.device:
            raise ValueError(f"q is on {q.device} but k on {k.device}: they share positions")
        self._check_rotate(q, rotation, False)
        self._check_rotate(k, rotation, True)
        return self._rotate_pair(q, k, rotation)

    def _rotate_pair(
        self, q: torch.Tensor, k: torch.Tensor, rotation: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k turned by ``rotation`` (this RoPE's tables for their positions), checked:
        one pass over both where that pays
        (:func:`~posenc.functional.rope_kernel.rotate_pair_checked`)."""
        if not self._paired:
            return self.rotate(q, rotation), self.rotate(k, rotation, key=True)
        args, wide = self._pair_args(rotation, q.shape[-1])
        return rotate_pair_checked(q, k, *args, wide=wide)

    def _rotate_heads(
        self, x: torch.Tensor, rotation: tuple[torch.Tensor, ...]
    ) -> torch.Tensor | None:
        """q's and k's heads side by side, turned in one pass where :meth:`_rotate_pair`
        takes one (:func:`~posenc.functional.rope_kernel.rotate_heads_checked`), without
        stacking them first."""
        if not self._paired:
            return None
        args, wide = self._pair_args(rotation, x.shape[-1])
        return rotate_heads_checked(x, *args, wide=wide)

    def _pair_args(
        self, rotation: tuple[torch.Tensor, ...], head_dim: int
    ) -> tuple[tuple[Any, ...], bool]:
        """``((cos, sin, layout, kernel, offset), wide)`` of a ``rotation`` for heads of
        ``head_dim``, as the checked rotations take them."""
        cos, sin = rotation
        c = self.config
        wide = type(rotation) is WideTables
        pairs = cos.shape[-1] // 2 if wide else cos.shape[-1]
        offset = rotary_offset(c.rotary_at, head_dim, pairs)
        return (cos, sin, c.layout, c.kernel, offset), wide

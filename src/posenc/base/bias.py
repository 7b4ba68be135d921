"""The bias kind: an encoding that adds a term to the attention scores before softmax."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, TypeVar

import torch

from ..arguments import check_callable, check_device, check_float, check_tensor
from ..config import EncodingConfig, check_int
from ..host_reads import checked
from ..positions import arange, check_batch, position_at
from .encoding import Encoding

__all__ = ["UNCHANGED", "BiasConfig", "BiasEncoding", "Unchanged"]

T = TypeVar("T")

#: the most values :meth:`BiasEncoding.derived` keeps per encoding (once full, the latest
#: kept one makes room)
DERIVED_MAX = 16


@dataclasses.dataclass(frozen=True)
class BiasConfig(EncodingConfig):
    """Base of the configs of bias encodings: ``n_heads``, the number of attention heads,
    is their first key (each config checks it in its ``__post_init__``)."""

    n_heads: int


class BiasEncoding(Encoding):
    """An encoding that adds one value per head and (query, key) pair to the scores.

    A subclass implements one method, :meth:`bias_at`: the bias as an elementwise function
    of head index, query position and key position. The same code then runs vectorised in
    :meth:`bias` (a materialised ``[heads, q_len, k_len]`` tensor, for short sequences and
    tests) and per score inside flex attention through :meth:`score_mod`, so no
    ``[heads, L, L]`` tensor is ever built on the fast path and the two cannot disagree.

    What else a subclass may declare, each opening a runner of :func:`posenc.attention`,
    is a small protocol of :mod:`posenc.base.capabilities` it subclasses (shift-invariant,
    linear slopes, relative tables, a clock of the input, a bias of the scores); the one
    flag every bias has is ``needs_q``, whether the bias depends on the queries (it then
    cannot be precomputed and shared by a model's layers).

    Shapes:
        ``bias(q_positions, k_positions)``: ``[heads, q_len, k_len]`` for 1-D positions,
        ``[batch, heads, q_len, k_len]`` for 2-D ones.
    """

    kind = "bias"
    size_key = "n_heads"
    config: BiasConfig
    #: True when the bias depends on the queries (Shaw): bias() and score_mod() need ``q``
    needs_q: ClassVar[bool] = False
    #: False where flex attention cannot differentiate the score_mod (inductor refuses a
    #: parameter indexed more than once in it, torch 2.11: FIRE's MLP); a backward then
    #: runs on the materialised bias
    flex_backward: ClassVar[bool] = True

    @property
    def n_heads(self) -> int:
        return self.config.n_heads

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Not a transform of q and k: a bias adds to the scores, inside attention. Raises
        a ``TypeError`` that names the two calls that apply it (``docs/
        bring-your-own-attention.md``)."""
        name = type(self).__name__
        raise TypeError(
            f"{name} is a bias encoding: it adds to the attention scores, so it runs inside "
            f"attention rather than on q and k. Call posenc.attention(q, k, v, enc) (causal "
            f"by default; no [heads, L, L] table on its fast paths), or add "
            f"enc.bias(q_positions, k_positions) ([heads, q_len, k_len]) to your scores "
            f"after the 1/sqrt(head_dim) scaling, e.g. as attn_mask of "
            f"F.scaled_dot_product_attention"
        )

    def bias_at(self, head: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The bias for ``head`` of a query at ``q_pos`` and a key at ``k_pos``.

        Elementwise over broadcastable tensors (integer head indices and integer or float
        positions); it may only use pointwise operations and index parameters by ``head``
        or by integer functions of the positions, because inside flex attention each
        argument is a scalar per score. Read parameters through an index (``p[head]``,
        ``p.view(1)[0]`` for a scalar): a bare 0-d parameter breaks flex's backward, and a
        reduction over a new dimension cannot be lowered inside the kernel (unroll it).
        Returns float32 (float64 for float64 positions).
        """
        raise NotImplementedError

    def bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        q: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """The materialised bias: ``[heads, q_len, k_len]``, or ``[batch, heads, q_len,
        k_len]`` when positions are ``[batch, len]``. ``q`` and ``scale`` (the attention's
        score scale) are needed only by biases that depend on the queries (Shaw's
        ``q · a_K * scale``, which overrides this). Costs
        ``heads * q_len * k_len`` memory: the fast path never calls it."""
        for name, positions in (("q_positions", q_positions), ("k_positions", k_positions)):
            if positions is None:
                raise TypeError(f"{name} must be a torch.Tensor, got None")
        self._check_query(q, scale)
        q_positions, k_positions = self._check_pair(q_positions, k_positions, q)
        heads = torch.arange(self.n_heads, device=q_positions.device)
        if q_positions.dim() == 1 and k_positions.dim() == 1:
            h, qp, kp = heads.view(-1, 1, 1), q_positions.view(1, -1, 1), k_positions.view(1, 1, -1)
        else:
            h = heads.view(1, -1, 1, 1)
            qp = q_positions.view(-1, 1, q_positions.shape[-1], 1)  # [b, 1, q_len, 1]
            kp = k_positions.view(-1, 1, 1, k_positions.shape[-1])  # [b, 1, 1, k_len]
        return self.bias_at(h, qp, kp)

    def masked_bias(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        masked: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`bias` with ``-inf`` where ``masked`` (bool, broadcastable to ``[q_len,
        k_len]``: a key its query may not see), for the blockwise paths that take the bias
        a block of query rows at a time (:mod:`posenc.attn.runners.rows`). An encoding that
        can mask as it computes overrides this, and may return a strided view."""
        bias = self.bias(q_positions, k_positions)
        return bias if masked is None else bias.masked_fill(masked, float("-inf"))

    def block_rows(
        self, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> tuple[Callable[..., torch.Tensor], list[torch.Tensor]]:
        """The bias a block of query rows at a time, for :mod:`posenc.attn.runners.rows`:
        ``(rows, tensors)``, where ``rows(i0, i1, n, masked, *tensors)`` is
        :meth:`masked_bias` of queries ``i0..i1-1`` over keys ``0..n-1`` and ``tensors``
        what it is computed from. By default the parameters that need a gradient, read
        from the module itself; an encoding that derives something from them once per
        call (FIRE's pieces) overrides this and returns that, so that each block's
        gradient stops there."""

        def rows(i0: int, i1: int, n: int, masked: torch.Tensor | None, *_: torch.Tensor):
            return self.masked_bias(q_positions[..., i0:i1], k_positions[..., :n], masked)

        return rows, [t for t in self.parameters() if t.requires_grad]

    def distance_values(
        self,
        n: int,
        causal: bool,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """The bias by distance over positions ``0..n-1``, for a bias that is one value per
        distance there (shift-invariant, or FIRE's queries below its threshold):
        ``w[:, x] = bias(query n - 1, key x)``, that is ``f(x - (n - 1))``, and ``-inf`` for
        the keys after their query (``x > n - 1``) when ``causal``; in ``dtype`` (None: as
        :meth:`bias` computes it). Computed once per length, mask, device and dtype while
        the encoding is unchanged (:meth:`derived`: read the result, do not write to it),
        and per call where a gradient reaches a parameter. A hook of
        :mod:`posenc.attn.runners.distance`, with the lengths of a checked call.

        Shapes:
            -> ``[heads, 2n - 1]``
        """
        if not isinstance(device, torch.device):
            device = check_device(device) or torch.get_default_device()

        def values() -> torch.Tensor:
            keys = arange(2 * n - 1, device=device)
            with checked():  # positions of its own, in range by construction: no value read
                out = self.bias(arange(1, device=device, offset=n - 1), keys)[:, 0]
            if causal:
                out = out.masked_fill(keys > n - 1, float("-inf"))
            return out if dtype is None else out.to(dtype)

        return self.derived(("distance values", n, causal, device, dtype), values)

    def score_mod(
        self,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
        q: torch.Tensor | None = None,
        q_offset: int = 0,
        scale: float | None = None,
    ):
        """A ``torch.nn.attention.flex_attention`` score_mod that adds this bias.

        Positions default to the indices (``q_idx + q_offset`` for queries, as in a KV
        cache where the queries follow ``q_offset`` cached keys); ``[len]`` or
        ``[batch, len]`` tensors give them explicitly.
        """
        self._check_query(q, scale)
        q_positions, k_positions = self._check_pair(q_positions, k_positions, q)
        check_int("q_offset", q_offset, minimum=0)

        def mod(score, b, h, q_idx, kv_idx):
            q_pos = position_at(q_positions, b, q_idx, q_offset)
            k_pos = position_at(k_positions, b, kv_idx)
            return score + self.bias_at(h, q_pos, k_pos).to(score.dtype)

        return mod

    def derived(self, key: Hashable, compute: Callable[[], T], *, host: bool = False) -> T:
        """``compute()``, kept under ``key`` and given again while this encoding's config,
        parameters and buffers stay what they were: what a call derives from them alone
        (ALiBi's slopes, a bias's values per distance, FIRE's threshold read on the host)
        is computed once, not per call. ``key`` names what is computed and everything
        else it depends on (lengths, device, dtype).

        Nothing is kept (``compute()`` runs) where a kept value could be wrong: while a
        gradient would reach a parameter (the value carries the call's graph; not for
        ``host`` values, Python numbers read on the host, which carry none), while
        ``torch.compile`` traces, and for tensors of a subclass (a fake tensor mode). A
        parameter or buffer is the same while it holds the same storage (kept alive here,
        so it cannot come back at the same address), shape, dtype and device and its
        version counter has not moved: ``.to()``, ``load_state_dict``, an optimizer's step
        and ``p.data = ...`` all change one of them. The config is the same object
        (configs are frozen). Inference mode is part of the key (its tensors cannot be
        saved for a backward outside it).

        Raises:
            TypeError: ``key`` not hashable, ``compute`` not callable or ``host`` not a
                bool, named.
        """
        _check_derived(key, compute, host)
        if torch.compiler.is_compiling():
            return compute()
        kept = self._kept()
        if kept is None or (not host and kept.grad and torch.is_grad_enabled()):
            return compute()
        full_key = (key, torch.is_inference_mode_enabled())
        try:  # a lookup, not a test and a read: another thread may drop it between
            return kept.values[full_key]
        except KeyError:
            pass
        value = compute()
        if len(kept.values) >= DERIVED_MAX:
            kept.values.popitem()  # one atomic step: safe across threads
        kept.values[full_key] = value
        return value

    def _kept(self) -> _Derived | None:
        """The derived values of this encoding's present state (a new, empty record when it
        changed), or None where its tensors cannot be compared (:func:`_marks`). Checked
        once inside an :data:`UNCHANGED` block."""
        kept = self.__dict__.get("_derived")
        block = _BLOCK.token
        if kept is not None and block is not None and kept.block is block:
            return kept
        tensors: list[torch.Tensor] = []
        _gather(self, tensors)
        marks = _marks(tensors)
        if marks is None:
            return None
        if kept is None or kept.config is not self.config or kept.marks != marks:
            kept = _Derived(self.config, tensors, marks)
            self.__dict__["_derived"] = kept
        kept.grad = any(t.requires_grad for t in tensors)
        kept.block = block
        return kept

    def __getstate__(self) -> dict[str, Any]:
        """The module's state without the derived values (:meth:`derived`): a pickle or a
        copy computes them anew."""
        state = super().__getstate__()
        state.pop("_derived", None)
        return state

    @staticmethod
    def _check_query(q: Any, scale: Any) -> None:
        """Raise, naming the argument, unless ``q`` is None or floating-point ``[batch,
        heads, q_len, head_dim]`` and ``scale`` None or a number > 0 (checked where the bias
        does not read them too: a wrong value is never silently ignored)."""
        if q is not None:
            check_tensor("q", q, dims=(4,))
        if scale is not None:
            check_float("scale", scale)

    def _check_pair(
        self, q_positions, k_positions, q: torch.Tensor | None = None
    ) -> tuple[Any, Any]:
        """The query and key positions (either may be None: the default) checked, as the
        bias computes with them (integer dtypes as int64): on the device of ``q`` (else of
        the queries' positions, else of the encoding), for ``q``'s queries, and with batch
        sizes that agree (with ``q``'s, else with the queries' positions)."""
        device = None if q is None else q.device
        if q_positions is not None:
            q_len = None if q is None else q.shape[2]
            q_positions = self.check_positions(
                q_positions, seq_len=q_len, name="q_positions", device=device
            )
        if k_positions is not None:
            if device is None and q_positions is not None:
                device = q_positions.device
            k_positions = self.check_positions(k_positions, name="k_positions", device=device)
        batch = None if q is None else q.shape[0]
        if batch is None and q_positions is not None and q_positions.dim() == 2:
            batch = q_positions.shape[0] if q_positions.shape[0] != 1 else None
        for name, positions in (("q_positions", q_positions), ("k_positions", k_positions)):
            if batch is not None and positions is not None:
                check_batch(positions, batch, name)
        return q_positions, k_positions


def _check_derived(key: object, compute: object, host: object) -> None:
    """Raise ``TypeError`` naming the argument of :meth:`BiasEncoding.derived` that is not
    what it takes."""
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"key must be hashable, got {type(key).__name__}") from None
    check_callable("compute", compute)
    if host is not True and host is not False:
        raise TypeError(f"host must be a bool, got {type(host).__name__} ({host!r})")


def _gather(module: torch.nn.Module, into: list[torch.Tensor]) -> None:
    """Every parameter and buffer of ``module`` and its children into ``into`` (a shared
    one may come twice): what ``parameters()`` and ``buffers()`` give, without their
    generators' bookkeeping (this runs per call)."""
    for p in module._parameters.values():
        if p is not None:
            into.append(p)
    for t in module._buffers.values():
        if t is not None:
            into.append(t)
    for child in module._modules.values():
        if child is not None:
            _gather(child, into)


def _marks(tensors: list[torch.Tensor]) -> tuple | None:
    """Per tensor its address, version, shape, dtype and device; None for a tensor of a
    subclass (fake, functional or lazy tensors) or one without them (an inference tensor
    has no version counter): nothing is kept for those."""
    marks = []
    try:
        for t in tensors:
            if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
                return None
            marks.append((t.data_ptr(), t._version, t.shape, t.dtype, t.device))
    except RuntimeError:
        return None
    return tuple(marks)


class _Block(threading.local):
    """The :data:`UNCHANGED` block a thread is in (a fresh token per block), or None."""

    def __init__(self) -> None:
        self.token: object | None = None
        self.outer: list[object | None] = []


_BLOCK = _Block()


class Unchanged:
    """``with UNCHANGED:``, a block in which no bias encoding's config, parameters or
    buffers change (the plan and the runner of one attention call): there
    :meth:`BiasEncoding.derived` compares an encoding's state with its kept one at the
    first value it is asked for, not at every one."""

    def __enter__(self) -> None:
        _BLOCK.outer.append(_BLOCK.token)
        _BLOCK.token = object()

    def __exit__(self, *exc: object) -> None:
        _BLOCK.token = _BLOCK.outer.pop()


#: the one :class:`Unchanged` block manager
UNCHANGED = Unchanged()


class _Derived:
    """An encoding's derived values (:meth:`BiasEncoding.derived`) with what they were
    computed from: the config object, and per parameter and buffer its marks
    (:func:`_marks`) and a detached alias, which keeps its storage alive so that no other
    tensor takes its address while the values are kept."""

    __slots__ = ("aliases", "block", "config", "grad", "marks", "values")

    def __init__(self, config: object, tensors: list[torch.Tensor], marks: tuple) -> None:
        self.config, self.marks = config, marks
        self.aliases = [t.detach() for t in tensors]
        self.values: dict[Hashable, Any] = {}
        #: whether a parameter requires grad; the UNCHANGED block it was checked in
        self.grad, self.block = False, None

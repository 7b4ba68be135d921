"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", ICLR 2024,
arXiv:2310.04418).

The bias of a query at ``i`` and a key at ``j`` is a small MLP of their distance,
log-compressed and normalised by the query position:

    b(i, j) = f_θ( ψ(i - j) / ψ(max(L, i)) ),     ψ(x) = log(c·x + 1)

``f_θ: R -> R^heads`` is ``Linear(1, hidden) -> ReLU -> Linear(hidden, heads)`` (hidden 32
in the paper), ``c`` and the threshold ``L`` are learned. The normaliser maps every visible
distance into ``[0, 1]`` whatever the query position (progressive interpolation); the
threshold ``L`` keeps it from over-amplifying distances at the first positions, so below
``L`` the bias depends on ``i - j`` only. It is the max, not the min: with the min the
normaliser would be fixed at ``ψ(L)`` past ``L`` and the inputs would leave ``[0, 1]``.

As the paper's code, ``ψ`` is ``log(|c·x| + 1)`` (defined for any sign of ``c``) and the
normaliser carries a small ``eps``. For ``i < j`` (bidirectional attention) the distance is
``|i - j|``, which is what that code computes.

**The MLP by pieces.** The MLP is the piecewise-linear function it is: per score, a piece
and one product per head instead of a hidden layer. ``f_θ(x) = W2·relu(w1·x + b1) + b2`` of
one input ``x`` is linear between the kinks ``t_k = -b1_k / w1_k`` of its hidden units:
between two consecutive kinks the same units are active (those with ``w1_k·x + b1_k > 0``),
so with ``p`` the number of kinks below ``x``,

    f_θ(x)_h = slope[p, h]·x + offset[p, h],
    slope[p, h] = Σ_{k on p} W2[h, k]·w1_k,   offset[p, h] = b2_h + Σ_{k on p} W2[h, k]·b1_k

The same function, rounded in another order (a sum of the slopes, then one product, against
a sum of the products). Where ``x`` lies exactly on a kink both neighbouring pieces give
the same value (the MLP is continuous), and the gradient is that of either piece (ReLU's
is that of the piece below).

The gradient with respect to ``slope`` and ``offset`` is a sum per piece of the score
gradients (times ``x``), per head. With the pieces ordered by their kinks, the scores on
piece ``p`` are those above kink ``p - 1`` and not above kink ``p``, so the sums per piece
are differences of the sums above each kink (:func:`pieces_backward`): a matrix product
of ``[grad·x, grad]`` with the indicators ``x > kink``, where a scatter-add of every score
into its piece is scalar code (conditional sums per kink, compiled, were slower).
Autograd carries the sums on to the MLP's weights through :func:`fire_pieces`. Nothing of
``[scores, hidden]`` is formed in either direction: the eager MLP writes and reads its
hidden layer, 32 floats a score, which is most of its cost.

:mod:`posenc.functional.fire_rows` runs these functions compiled, fused with FIRE's input.
"""

from __future__ import annotations

import math

import torch

from ..arguments import check_devices, check_float, check_tensor

__all__ = [
    "FIRE_EPS",
    "KINK_STEP",
    "evaluate_pieces",
    "fire_input",
    "fire_input_bound",
    "fire_input_partials",
    "fire_mlp",
    "fire_mlp_matmul",
    "fire_mlp_pieces",
    "fire_pieces",
    "fire_psi",
    "on_piece",
    "pieces_backward",
    "pieces_within",
    "units_within",
]

#: added to the normaliser ψ(max(L, i)), as in the paper's code
FIRE_EPS = 1e-6


def fire_psi(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The log transform ``ψ(x) = log(|c·x| + 1)``, elementwise.

    Shapes:
        x, c: broadcastable -> their broadcast shape
    """
    check_tensor("x", x)
    check_tensor("c", c)
    check_devices(x=x, c=c)
    return torch.log1p((c * x).abs())


def fire_input(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    eps: float = FIRE_EPS,
) -> torch.Tensor:
    """The MLP's input ``ψ(|i - j|) / (ψ(max(L, i)) + eps)``, elementwise.

    Args:
        q_pos: query positions ``i`` (floating, >= 0).
        k_pos: key positions ``j`` (floating, >= 0).
        c: the log-transform scale.
        threshold: ``L``, the smallest normalising position.
        eps: added to the normaliser.

    Shapes:
        q_pos, k_pos, c, threshold: broadcastable -> their broadcast shape
    """
    _check_input(q_pos, k_pos, c, threshold, eps)
    distance = (q_pos - k_pos).abs()
    normaliser = fire_psi(torch.maximum(q_pos, threshold), c) + eps
    return fire_psi(distance, c) / normaliser


def _check_input(
    q_pos: torch.Tensor, k_pos: torch.Tensor, c: torch.Tensor, threshold: torch.Tensor, eps: float
) -> None:
    named = {"q_pos": q_pos, "k_pos": k_pos, "c": c, "threshold": threshold}
    for name, value in named.items():
        check_tensor(name, value)
    check_devices(**named)
    check_float("eps", eps)


def fire_input_partials(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    eps: float = FIRE_EPS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`fire_input` ``x = ψ(d) / (ψ(m) + eps)``, with ``d = |i - j|`` and
    ``m = max(L, i)``, and its partial derivatives with respect to ``c`` and the threshold
    ``L``, elementwise, as autograd takes them: ``∂ψ(u)/∂c = sign(c·u)·u / (1 + |c·u|)``,
    ``∂ψ(m)/∂m = sign(c·m)·c / (1 + |c·m|)``, and ``∂m/∂L`` is 1 where ``L > i``, 0 where
    ``L < i`` and ½ where they are equal (``torch.maximum`` splits a tie).

        ∂x/∂c = (∂ψ(d)/∂c - x·∂ψ(m)/∂c) / (ψ(m) + eps)
        ∂x/∂L = -x·∂ψ(m)/∂m·∂m/∂L / (ψ(m) + eps)

    Shapes:
        q_pos, k_pos, c, threshold: broadcastable -> ``(x, ∂x/∂c, ∂x/∂L)``, each of their
        broadcast shape
    """
    distance = (q_pos - k_pos).abs()
    m = torch.maximum(q_pos, threshold)
    cd, cm = c * distance, c * m
    normaliser = fire_psi(m, c) + eps
    x = fire_psi(distance, c) / normaliser
    d_c = (cd.sign() * distance / (1 + cd.abs()) - x * cm.sign() * m / (1 + cm.abs())) / normaliser
    m_threshold = (threshold > q_pos).to(x.dtype) + (threshold == q_pos).to(x.dtype) / 2
    d_threshold = -x * cm.sign() * c / (1 + cm.abs()) * m_threshold / normaliser
    return x, d_c, d_threshold


def fire_input_bound(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    eps: float = FIRE_EPS,
) -> torch.Tensor:
    """The largest :func:`fire_input` over every query and key: for each query the input
    grows with the distance, so its largest is at the farther of the two extreme keys.
    (The smallest is 0 or more: ``ψ >= 0`` and the normaliser ``> 0``.)

    Shapes:
        q_pos ``[..., q]``, k_pos ``[..., k]`` (floating, >= 0; the leading dimensions
        broadcastable), c, threshold 0-d -> 0-d
    """
    lo, hi = k_pos.amin(-1, keepdim=True), k_pos.amax(-1, keepdim=True)
    farthest = torch.maximum((q_pos - lo).abs(), (q_pos - hi).abs())
    return fire_input(q_pos, q_pos - farthest, c, threshold, eps).max()


def fire_mlp(
    x: torch.Tensor,
    head: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """Output ``head`` of ``f_θ(x) = W2·relu(w1·x + b1) + b2``, elementwise in ``x``.

    Written as a sum over the hidden units, unrolled in Python, so that it is a pointwise
    expression of ``x`` and ``head``: flex attention compiles a score_mod into its kernel
    only as pointwise code, and a reduction over a hidden dimension inside it fails to
    lower ("Buffers cannot be created while lowering a pointwise subgraph"). With
    broadcast inputs the hidden activations are computed once for every head. The math
    runs in ``x.dtype``.

    Args:
        x: the MLP input (:func:`fire_input`).
        head: integer head indices, broadcastable with ``x``.
        w1, b1: the first layer (``Linear(1, hidden)``: weight column and bias).
        w2, b2: the second layer (``Linear(hidden, heads)``).

    Shapes:
        x, head: broadcastable; w1, b1: ``[hidden]``; w2: ``[heads, hidden]``; b2:
        ``[heads]`` -> the broadcast shape of ``x`` and ``head``
    """
    check_tensor("head", head, kinds=("int",))
    _check_mlp(x, w1, b1, w2, b2, head=head)
    dtype = x.dtype  # weights are indexed first, then cast: a pointwise cast per score
    out = b2[head].to(dtype)
    for unit in range(w1.shape[0]):
        hidden = torch.relu(w1[unit].to(dtype) * x + b1[unit].to(dtype))
        out = out + w2[head, unit].to(dtype) * hidden
    return out


def fire_mlp_matmul(
    x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor
) -> torch.Tensor:
    """``f_θ(x)`` for every head as two batched matrix products over the hidden units,
    the scores in the columns so that the result comes out heads first with no transpose:
    :func:`fire_mlp` for all heads, rounded in another order. Math in ``x.dtype``.

    Shapes:
        x ``[..., q, k]``; w1, b1 ``[hidden]``; w2 ``[heads, hidden]``; b2 ``[heads]`` ->
        ``[..., heads, q, k]``
    """
    _check_mlp(x, w1, b1, w2, b2)
    if x.dim() < 2:
        raise ValueError(f"x must be [..., q, k], got shape {tuple(x.shape)}")
    dtype = x.dtype
    w1, b1 = w1.to(dtype).unsqueeze(-1), b1.to(dtype).unsqueeze(-1)  # [hidden, 1]
    w2, b2 = w2.to(dtype), b2.to(dtype).unsqueeze(-1)
    flat = x.reshape(math.prod(x.shape[:-2]), 1, x.shape[-2] * x.shape[-1])  # [n, 1, q·k]
    hidden = torch.baddbmm(b1, w1.expand(flat.shape[0], -1, -1), flat).relu_()
    out = torch.baddbmm(b2, w2.expand(flat.shape[0], -1, -1), hidden)  # [n, heads, q·k]
    return out.view(*x.shape[:-2], w2.shape[0], *x.shape[-2:])


def _check_mlp(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    **others: torch.Tensor,
) -> None:
    """Raise unless ``x`` and the weights of ``Linear(1, hidden) -> Linear(hidden, heads)``
    are floating tensors of those shapes, on one device with ``others``."""
    check_tensor("x", x)
    check_tensor("w1", w1, dims=(1,))
    check_tensor("b1", b1, dims=(1,))
    check_tensor("w2", w2, dims=(2,))
    check_tensor("b2", b2, dims=(1,))
    check_devices(x=x, w1=w1, b1=b1, w2=w2, b2=b2, **others)
    hidden, heads = w1.shape[0], w2.shape[0]
    if b1.shape[0] != hidden or w2.shape[1] != hidden or b2.shape[0] != heads:
        raise ValueError(
            "w1, b1 must be [hidden], w2 [heads, hidden] and b2 [heads], got "
            f"{tuple(w1.shape)}, {tuple(b1.shape)}, {tuple(w2.shape)} and {tuple(b2.shape)}"
        )


#: :func:`pieces_within` pads the kinks it keeps to a multiple of this: one compiled graph
#: per multiple, and at most this many comparisons per score in vain
KINK_STEP = 4


def fire_pieces(
    w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pieces of ``f_θ(x) = W2·relu(w1·x + b1) + b2``: its kinks in ascending order and
    each piece's slope and offset (differentiable in the weights; the kinks are not, as
    the function is continuous across them).

    A unit with ``w1_k = 0`` has no kink (``+inf``, last): it adds ``relu(b1_k)`` to
    every offset.

    Args:
        w1, b1: the first layer (``Linear(1, hidden)``: weight column and bias).
        w2, b2: the second layer (``Linear(hidden, heads)``).

    Shapes:
        w1, b1 ``[hidden]``; w2 ``[heads, hidden]``; b2 ``[heads]`` -> kinks ``[hidden]``,
        slope and offset ``[hidden + 1, heads]`` (piece ``p``: ``p`` kinks below ``x``)

    Example:
        >>> # relu(2x - 1) + relu(2 - x): kinks 0.5 and 2
        >>> w1, b1 = torch.tensor([2.0, -1.0]), torch.tensor([-1.0, 2.0])
        >>> kinks, slope, offset = fire_pieces(w1, b1, torch.ones(1, 2), torch.zeros(1))
        >>> kinks.tolist(), slope[:, 0].tolist(), offset[:, 0].tolist()
        ([0.5, 2.0], [-1.0, 1.0, 2.0], [2.0, 1.0, -1.0])
    """
    hidden = w1.shape[0]
    flat = w1 == 0
    with torch.no_grad():
        kinks = torch.where(flat, torch.inf, -b1 / torch.where(flat, 1.0, w1))
        kinks, order = kinks.sort()
        rank = torch.empty_like(order)
        rank[order] = torch.arange(hidden, device=order.device)
        pieces = torch.arange(hidden + 1, device=order.device)
        above = pieces[:, None] > rank  # [hidden + 1, hidden]: x above unit k's kink
        active = torch.where(flat, b1 > 0, torch.where(w1 > 0, above, ~above))
    on = active.to(w1.dtype)
    slope = on @ (w2 * w1).T  # [hidden + 1, heads]
    offset = on @ (w2 * b1).T + b2
    return kinks, slope, offset


def pieces_within(
    kinks: torch.Tensor, slope: torch.Tensor, offset: torch.Tensor, bound: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pieces an input in ``[0, bound]`` can fall on, as :func:`fire_pieces` gives them
    (differentiable in ``slope`` and ``offset``): the kinks below 0 lie below every such
    input and those above ``bound`` above it, so they are dropped and an input's piece is
    counted among the rest. The kinks kept are padded with ``+inf`` to a multiple of
    :data:`KINK_STEP` (the compiled kernels unroll one comparison per kink: few counts,
    few graphs).

    Shapes:
        kinks ``[hidden]`` (ascending), slope, offset ``[hidden + 1, heads]`` -> kinks
        ``[n]``, slope, offset ``[n + 1, heads]``, ``n`` a multiple of :data:`KINK_STEP`

    Example:
        >>> kinks, slope, offset = torch.tensor([-1.0, 0.5, 2.0]), torch.eye(4), torch.eye(4)
        >>> kinks, slope, offset = pieces_within(kinks, slope, offset, 1.0)
        >>> kinks.tolist(), slope.argmax(-1).tolist()
        ([0.5, inf, inf, inf], [1, 2, 2, 2, 2])
    """
    first, last = (int(n) for n in torch.stack([(kinks < 0).sum(), (kinks <= bound).sum()]))
    kept = last - first
    pad = max(KINK_STEP, -(-kept // KINK_STEP) * KINK_STEP) - kept
    kinks = torch.cat([kinks[first:last], kinks.new_full((pad,), torch.inf)])
    rows = torch.arange(first, last + 1 + pad, device=slope.device).clamp_(max=last)
    return kinks, slope[rows], offset[rows]


def units_within(
    w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor, bound: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A smaller MLP equal to ``W2·relu(w1·x + b1) + b2`` for every input in ``[0, bound]``,
    as :func:`pieces_within` is for the pieces (differentiable in the weights): a unit whose
    kink lies outside ``[0, bound]`` is on or off for every such input, so the units that
    are on add an affine term ``a·x + b``, folded into one unit ``relu(x + 1)`` (last: on
    for every such input, 0 included) with ``a`` its output weights and ``b - a`` added to
    ``b2``, and those that are off are dropped (a unit with ``w1 = 0`` is on where
    ``b1 > 0``: its gradient in ``w1`` stays). The eager MLP
    (:func:`~posenc.functional.fire.fire_mlp_matmul`) then writes its hidden layer for the
    units that bend inside the inputs' range only (at initialisation about a third).

    Shapes:
        w1, b1 ``[hidden]``; w2 ``[heads, hidden]``; b2 ``[heads]`` -> ``[kept + 1]``,
        ``[kept + 1]``, ``[heads, kept + 1]``, ``[heads]``

    Example:
        >>> from posenc.functional.fire import fire_mlp_matmul
        >>> w1, b1, w2, b2 = torch.randn(32), torch.randn(32), torch.randn(4, 32), torch.randn(4)
        >>> small = units_within(w1, b1, w2, b2, 1.0)
        >>> x = torch.rand(5, 7)
        >>> bool(small[0].shape[0] <= 33)
        True
        >>> whole = fire_mlp_matmul(x, w1, b1, w2, b2)
        >>> torch.allclose(fire_mlp_matmul(x, *small), whole, atol=1e-5)
        True
    """
    with torch.no_grad():
        flat = w1 == 0
        kink = -b1 / torch.where(flat, 1.0, w1)
        inside = ~flat & (kink >= 0) & (kink <= bound)
        on = ~inside & torch.where(flat, b1 > 0, (w1 > 0) == (kink < 0))  # over [0, bound]
        kept, linear = inside.nonzero()[:, 0], on.nonzero()[:, 0]
    w2_linear = w2[:, linear]
    slope = w2_linear @ w1[linear]  # [heads]
    b2 = b2 + w2_linear @ b1[linear] - slope
    one = w1.new_ones(1)
    return (
        torch.cat([w1[kept], one]),
        torch.cat([b1[kept], one]),
        torch.cat([w2[:, kept], slope[:, None]], 1),
        b2,
    )


def fire_mlp_pieces(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
    masked: torch.Tensor | None = None,
) -> torch.Tensor:
    """``f_θ(x)`` for every head, as :func:`~posenc.functional.fire.fire_mlp` gives it per
    head, by pieces (see the module); ``-inf`` where ``masked``. Eager and differentiable
    by autograd; the math runs in ``x.dtype``.

    Args:
        x: the MLP's inputs (:func:`~posenc.functional.fire.fire_input`).
        w1, b1, w2, b2: the MLP (see :func:`fire_pieces`).
        masked: True where the result is ``-inf`` (a key its query may not see), or None.

    Shapes:
        x ``[...]``, masked broadcastable to it -> ``[..., heads]`` (heads last)

    Example:
        >>> from posenc.functional.fire import fire_mlp
        >>> w1, b1, w2, b2 = torch.randn(8), torch.randn(8), torch.randn(3, 8), torch.randn(3)
        >>> x = torch.rand(5, 7)
        >>> per_head = [fire_mlp(x, torch.tensor(h), w1, b1, w2, b2) for h in range(3)]
        >>> torch.allclose(fire_mlp_pieces(x, w1, b1, w2, b2), torch.stack(per_head, -1), atol=1e-5)
        True
    """
    pieces = fire_pieces(*(t.to(x.dtype) for t in (w1, b1, w2, b2)))
    return evaluate_pieces(x, *pieces, masked).movedim(0, -1)


def on_piece(x: torch.Tensor, kinks: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``table[p]`` for every ``x``, ``p`` the number of ``kinks`` below it, heads first:
    one comparison and one select per kink (unrolled: compiled, a vectorised pointwise
    loop, where a gather of ``table[p]`` per score and head loads one float at a time).

    Shapes:
        x ``[...]``; kinks ``[n]`` (ascending); table ``[n + 1, heads]`` -> ``[heads, ...]``
    """
    rows = table.T.reshape(*table.T.shape, *([1] * x.dim()))  # [heads, n + 1, 1, ...]
    out = rows[:, 0]
    for k in range(kinks.shape[0]):
        out = torch.where(x > kinks[k], rows[:, k + 1], out)
    return out


def evaluate_pieces(
    x: torch.Tensor,
    kinks: torch.Tensor,
    slope: torch.Tensor,
    offset: torch.Tensor,
    masked: torch.Tensor | None = None,
) -> torch.Tensor:
    """``slope[p]·x + offset[p]`` for every head, ``p`` the number of ``kinks`` below
    ``x``, ``-inf`` where ``masked``, heads first (the layout attention reads: each head's
    scores contiguous). Differentiable by autograd (its gradient written out is
    :func:`pieces_backward`).

    Shapes:
        x ``[...]``, masked broadcastable to it; kinks ``[n]``; slope, offset
        ``[n + 1, heads]`` -> ``[heads, ...]``
    """
    out = on_piece(x, kinks, slope) * x + on_piece(x, kinks, offset)
    return out if masked is None else out.masked_fill(masked, float("-inf"))


def pieces_backward(
    x: torch.Tensor,
    kinks: torch.Tensor,
    slope: torch.Tensor,
    grad: torch.Tensor,
    masked: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`evaluate_pieces` with respect to ``x``, ``slope`` and
    ``offset``, for the gradient ``grad`` of its result: ``Σ_h grad_h·slope[p, h]`` per
    score, and the sums per piece of ``grad·x`` and ``grad``, each the difference of the
    sums above consecutive kinks (see the module), those a matrix product of the scores'
    gradients with the indicators ``x > kink``.

    Shapes:
        x ``[...]``, masked broadcastable to it, grad ``[heads, ...]``; kinks ``[n]``;
        slope ``[n + 1, heads]`` -> ``(grad_x [...], grad_slope, grad_offset [n + 1,
        heads])``
    """
    if masked is not None:
        grad = grad.masked_fill(masked, 0.0)
    heads = grad.shape[0]
    grad_x = (grad * on_piece(x, kinks, slope)).sum(0)
    both = torch.cat([grad * x, grad]).reshape(2 * heads, -1)  # [2·heads, scores]
    above = (x.expand(grad.shape[1:]).reshape(-1, 1) > kinks).to(x.dtype)  # [scores, n]
    # sums above kink k - 1 (every score for k = 0): [n + 1, 2·heads]
    sums = torch.cat([both.sum(-1, keepdim=True), both @ above], -1).T
    per_piece = sums - torch.cat([sums[1:], torch.zeros_like(sums[:1])])
    return grad_x, per_piece[:, :heads], per_piece[:, heads:]

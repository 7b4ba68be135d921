"""What the windows and chunks of a layer plan mean for the distances its RoPE layers see
(:func:`reach_note`), and for the extension plans of a report (:func:`windows_note`).

RoPE's scores depend on the distance between a query and a key only, so a layer that
attends within a window (or a chunk) sees the same distances at any sequence length: a
causal window of ``W`` keys sees distances ``0 .. W - 1``, a bidirectional one (ModernBERT's
``local_attention``) ``0 .. W // 2``, a chunk of ``C`` positions ``0 .. C - 1``. A scaling
widens no window: what it changes for such a layer is how it rotates those distances.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...attn.masks import AttnPattern
from ...models.plan import LayerPlan
from ...rotary.rope import RoPE
from .plans import ExtensionPlan

__all__ = ["farthest", "reach_note", "windows_note"]


def farthest(pattern: AttnPattern, causal: bool) -> int | None:
    """The largest distance ``|q - k|`` a layer with ``pattern`` sees at any length; None
    for full attention (every distance up to the sequence's length).

    Example:
        >>> farthest(AttnPattern(window=4096), causal=True), farthest(AttnPattern(), True)
        (4095, None)
    """
    if pattern.window is not None:
        return pattern.window - 1 if causal else pattern.window // 2
    if pattern.chunk is not None:
        return pattern.chunk - 1
    return None


def _local_reach(plan: LayerPlan, causal: bool) -> tuple[int, list[str], int, int] | None:
    """``(farthest distance, the local patterns, n full-attention RoPE layers, n NoPE
    layers)`` of a plan with local RoPE layers; None without any."""
    rope = [spec for spec in plan if spec.encoding is not None]
    local = [spec.pattern for spec in rope if spec.pattern.local]
    if not local:
        return None
    far = max(farthest(p, causal) or 0 for p in local)
    patterns = list(dict.fromkeys(p.describe() for p in local))
    return far, patterns, len(rope) - len(local), len(plan) - len(rope)


def reach_note(plan: LayerPlan, causal: bool) -> str | None:
    """The farthest distance the windowed (or chunked) RoPE layers of ``plan`` see, and
    whether other layers see farther; None for a plan without such layers."""
    reach = _local_reach(plan, causal)
    if reach is None:
        return None
    far, patterns, full_rope, nope = reach
    within = " / ".join(patterns)
    if full_rope:
        return (
            f"the RoPE layers with a {within} see no distance past {far} at any length (RoPE's "
            f"scores depend on the distance only); the other {full_rope} RoPE layers see every "
            "distance up to the sequence's length"
        )
    others = f"; the {nope} full-attention layers are NoPE" if nope else ""
    return (
        f"no RoPE layer sees a distance past {far} at any length: every RoPE layer attends "
        f"within a {within} (RoPE's scores depend on the distance only){others}"
    )


def _changes(base: RoPE, plan: ExtensionPlan, target: int, original: int) -> str:
    """How ``plan`` rotates the distances ``base`` (the checkpoint's RoPE) rotated: how many
    pairs' frequencies differ at ``target`` tokens, and its attention factor."""
    before, after = base.inv_freq(target), plan.rope.inv_freq(target)
    changed = int((~torch.isclose(before, after, rtol=1e-9, atol=0.0)).sum())
    text = f"{plan.method} {changed} of {before.numel()} pairs"
    if plan.method == "dynamic":
        text += f" (past {original} tokens)"
    factor = plan.rope.attention_factor(target)
    if factor != 1.0:
        text += f", attention factor {factor:.4g}"
    return text


def windows_note(
    plan: LayerPlan | None,
    causal: bool,
    base: RoPE,
    plans: Sequence[ExtensionPlan],
    target: int,
    original: int,
    scaled_type: str | None,
) -> str:
    """What the extension ``plans`` do to the windowed RoPE layers of ``plan`` ("" for a
    plan without them, or no plans): nothing, where only the ``scaled_type`` layers are
    scaled (a RoPE per layer type); else they widen no window and change how those layers
    rotate the distances they see, pair by pair (:func:`_changes`, at ``target`` tokens,
    against ``base``, the checkpoint's RoPE, whose original context is ``original``)."""
    reach = None if plan is None or not plans else _local_reach(plan, causal)
    if reach is None:
        return ""
    far, _, full_rope, nope = reach
    if scaled_type is not None:
        return (
            f"the plans scale the {scaled_type} layers' RoPE only; the other layers (the "
            "windowed ones among them) keep theirs, so nothing a windowed layer sees changes"
        )
    changes = "; ".join(_changes(base, p, target, original) for p in plans)
    if full_rope:
        return (
            f"a scaling widens no window: the windowed RoPE layers still see distances 0-{far} "
            f"only, and each plan changes how they rotate them ({changes}); the {full_rope} "
            "full-attention RoPE layers are the ones that see farther"
        )
    untouched = " and the NoPE layers take no RoPE scaling" if nope else ""
    return (
        f"no RoPE layer sees a distance past {far} at any length{untouched}, so no plan lets "
        f"a layer see farther; each plan still changes how the RoPE layers rotate distances "
        f"0-{far} ({changes})"
    )

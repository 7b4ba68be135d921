"""RoPE context-extension scalings as pure functions: one per ``rope_type``, in a plain dict.

Every function of :data:`ROPE_SCALINGS` has the signature ``fn(head_dim, rotary_dim, base,
seq_len=None, device=None, **params) -> (inv_freq, attention_factor)``, its ``params`` the
keys of Hugging Face's ``rope_parameters`` for that type (as transformers'
``ROPE_INIT_FUNCTIONS``, with plain arguments in place of a model config). ``inv_freq`` is
float64 (``[n_pairs]``) so that angles stay exact at positions in the millions, and
``attention_factor`` multiplies cos and sin once (in :func:`posenc.functional.rope_cos_sin`),
so attention logits scale by its square. The validated records of the parameters are in
:mod:`posenc.rotary.scaling`.

==============  ======================================================================
``default``     θ_i = base^(-2i/d) (Su et al. 2021, arXiv:2104.09864)
``linear``      position interpolation: θ_i / factor (Chen et al. 2023, arXiv:2306.15595)
``ntk``         NTK-aware: base' = base · factor^(d/(d-2)) (bloc97, 2023)
``dynamic``     NTK with factor' = factor·L/L_orig - (factor - 1) once L > L_orig
                (Hugging Face "dynamic"; keys in a KV cache keep the old base)
``ntk_alpha``   NTK with a fixed alpha: base' = base · alpha^(d/(d-2)), whatever the
                length (Tencent Hunyuan; its checkpoints say "dynamic" with an ``alpha``)
``ntk_mixed``   θ_i / λ_i, λ_i = factor^(((i+1)/n)^b) with ``mixed_b`` b, else
                factor^(2(i+1)/d) (Su 2023, kexue.fm/archives/9706; vLLM's "ntk")
``yarn``        NTK-by-parts ramp between beta_fast and beta_slow, temperature
                0.1·ln(factor) + 1 (Peng et al. 2023, arXiv:2309.00071)
``llama3``      wavelengths < L/high_freq_factor kept, > L/low_freq_factor divided by
                factor, smooth between (Meta, Llama 3.1)
``longrope``    per-pair factors: short up to L_orig, long beyond; attention factor
                sqrt(1 + ln(factor)/ln(L_orig)) (Ding et al. 2024, arXiv:2402.13753)
``proportional`` a fraction of the pairs rotate with base^(-2i/head_dim), the rest not at
                all, all divided by factor (Hugging Face "proportional", Gemma)
==============  ======================================================================
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import torch

__all__ = [
    "ENCODING_KEYS",
    "ROPE_SCALINGS",
    "default_inv_freq",
    "ntk_base",
    "scaling_keys",
    "yarn_mscale",
]

#: keys of a Hugging Face ``rope_parameters`` dict that are not scaling parameters: they
#: configure the encoding itself and are read by :class:`posenc.rotary.RoPE`
ENCODING_KEYS = ("rope_theta", "partial_rotary_factor")

Device = torch.device | str | None


def default_inv_freq(
    rotary_dim: int,
    base: float | torch.Tensor,
    *,
    denominator: int | None = None,
    device: Device = None,
) -> torch.Tensor:
    """θ_i = base^(-2i/denominator) for i < rotary_dim/2, in float64.

    Args:
        rotary_dim: how many dimensions rotate (two per pair).
        base: the wavelength base (``rope_theta``); a float64 0-d tensor where it depends
            on a traced length (:func:`traced_length`).
        denominator: the exponent's denominator (default ``rotary_dim``).

    Shapes:
        returns ``[rotary_dim // 2]``
    """
    denominator = denominator or rotary_dim
    exponents = torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float64) / denominator
    return (base if isinstance(base, torch.Tensor) else float(base)) ** -exponents


def traced_length(seq_len: torch.SymInt, device: Device = None) -> torch.Tensor:
    """A length that is symbolic (``torch.export`` or ``torch.compile`` with a dynamic
    length) as a float64 0-d tensor, so that the length-dependent scalings are computed by
    the program at every length, in float64. Python on the ``SymInt`` would not do: a
    comparison (LongRoPE's choice of factors) or ``float()`` of a SymFloat (dynamic NTK's
    base) is a guard that fixes the length to the example's side of the original length,
    which ``torch.export`` refuses and ``torch.onnx.export`` drops (its deferred asserts,
    its refined shapes), writing a model that runs past that length with the example's
    frequencies; and ``torch.onnx`` computes what stays symbolic in float32.

    Shapes:
        returns ``[]``
    """
    # the op takes a SymInt as its Scalar (the stubs name plain numbers only)
    return torch.scalar_tensor(seq_len, dtype=torch.float64, device=device)  # type: ignore[arg-type]


def ntk_base(
    base: float, factor: float | torch.Tensor, rotary_dim: int, rope_type: str = "ntk"
) -> float | torch.Tensor:
    """The NTK-aware base' = base · factor^(d/(d-2)) for rotary dimension d (bloc97, 2023);
    a tensor where ``factor`` is one."""
    if rotary_dim <= 2:
        raise ValueError(
            f"{rope_type!r} scaling needs a rotary dimension > 2 (base · factor^(d/(d-2))), "
            f"got {rotary_dim}"
        )
    return base * factor ** (rotary_dim / (rotary_dim - 2))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature sqrt(1/t) = 0.1·mscale·ln(factor) + 1 (1 for factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def default_scaling(head_dim, rotary_dim, base, seq_len=None, device=None):
    """θ_i = base^(-2i/d) (Su et al. 2021, arXiv:2104.09864)."""
    return default_inv_freq(rotary_dim, base, device=device), 1.0


def linear_scaling(head_dim, rotary_dim, base, seq_len=None, device=None, *, factor):
    """Position interpolation f(x, m) = f(x, m / factor), as θ_i / factor (Chen et al. 2023,
    arXiv:2306.15595)."""
    return default_inv_freq(rotary_dim, base, device=device) / factor, 1.0


def ntk_scaling(head_dim, rotary_dim, base, seq_len=None, device=None, *, factor):
    """NTK-aware: base' = base · factor^(d/(d-2)), positions unchanged (bloc97, 2023)."""
    base = ntk_base(base, factor, rotary_dim, "ntk")
    return default_inv_freq(rotary_dim, base, device=device), 1.0


def dynamic_scaling(
    head_dim,
    rotary_dim,
    base,
    seq_len=None,
    device=None,
    *,
    factor,
    original_max_position_embeddings,
):
    """Dynamic NTK: past L_orig, base' = base · (factor·L/L_orig - (factor - 1))^(d/(d-2));
    the default at or below L_orig (Hugging Face "dynamic", after bloc97 and emozilla 2023)."""
    original = original_max_position_embeddings
    if isinstance(seq_len, torch.SymInt):  # a dynamic length: the base computed in the program
        length = traced_length(seq_len, device).clamp(min=original)
    else:
        length = original if seq_len is None else max(seq_len, original)
    factor = factor * length / original - (factor - 1)
    base = ntk_base(base, factor, rotary_dim, "dynamic")
    return default_inv_freq(rotary_dim, base, device=device), 1.0


def ntk_alpha_scaling(
    head_dim,
    rotary_dim,
    base,
    seq_len=None,
    device=None,
    *,
    alpha,
    factor=1.0,
    mscale=1.0,
    mscale_all_dim=1.0,
    beta_fast=None,
    beta_slow=None,
    original_max_position_embeddings=None,
):
    """NTK-aware with a fixed alpha: base' = base · alpha^(d/(d-2)), static (Tencent's
    Hunyuan models; vLLM's ``DynamicNTKAlphaRotaryEmbedding``). Their checkpoints label it
    "dynamic" and carry YaRN's keys too, which no formula of this type reads: ``factor``,
    ``mscale`` and ``mscale_all_dim`` must be 1 (their neutral values, checked by the
    record), ``beta_fast``, ``beta_slow`` and ``original_max_position_embeddings`` shape
    nothing here."""
    base = ntk_base(base, alpha, rotary_dim, "ntk_alpha")
    return default_inv_freq(rotary_dim, base, device=device), 1.0


def ntk_mixed_scaling(
    head_dim, rotary_dim, base, seq_len=None, device=None, *, factor, mixed_b=None
):
    """NTK-RoPE-mixed (Su 2023, kexue.fm/archives/9706), as vLLM's ``ntk`` rope type
    (``NTKScalingRotaryEmbedding``) defines it: pair i of n = d/2 has θ_i / λ_i with
    ``λ_i = factor^(((i + 1) / n)^b)`` for ``mixed_b`` b, or, without it, ``λ_i =
    factor^(2(i + 1)/d)`` (the base times factor, every frequency then divided by
    factor^(2/d)). Either way the lowest frequency is divided by the whole factor."""
    theta = default_inv_freq(rotary_dim, base, device=device)
    step = torch.arange(1, theta.numel() + 1, device=device, dtype=torch.float64)
    n = theta.numel()
    exponent = (step / n) ** mixed_b if mixed_b is not None else 2 * step / rotary_dim
    return theta / factor**exponent, 1.0


def yarn_scaling(
    head_dim,
    rotary_dim,
    base,
    seq_len=None,
    device=None,
    *,
    factor,
    original_max_position_embeddings,
    attention_factor=None,
    beta_fast=32.0,
    beta_slow=1.0,
    mscale=None,
    mscale_all_dim=None,
    truncate=True,
):
    """YaRN (Peng et al. 2023, arXiv:2309.00071): pairs with wavelengths that fit more than
    beta_fast times into L_orig keep θ_i, those fitting fewer than beta_slow times use
    θ_i / factor, with a linear ramp in pair index between (the reference code's ramp);
    attention factor 0.1·ln(factor) + 1, or DeepSeek's mscale ratio, or as given."""
    if attention_factor is None:
        if mscale and mscale_all_dim:  # DeepSeek: the ratio of two temperatures
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)

    def correction_dim(rotations: float) -> float:
        # the pair index whose wavelength fits `rotations` times in the original context
        ratio = original_max_position_embeddings / (rotations * 2 * math.pi)
        return rotary_dim * math.log(ratio) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # a ramp of zero width would divide by zero
    pairs = torch.arange(rotary_dim // 2, device=device, dtype=torch.float64)
    # 1 where the pair keeps its frequency (extrapolation), 0 where it is interpolated
    keep = 1 - ((pairs - low) / (high - low)).clamp(0, 1)
    inv_freq = default_inv_freq(rotary_dim, base, device=device)
    return inv_freq / factor * (1 - keep) + inv_freq * keep, attention_factor


def llama3_scaling(
    head_dim,
    rotary_dim,
    base,
    seq_len=None,
    device=None,
    *,
    factor,
    low_freq_factor,
    high_freq_factor,
    original_max_position_embeddings,
):
    """Llama 3.1: wavelengths λ < L_orig/high_freq_factor keep θ_i, λ > L_orig/low_freq_factor
    use θ_i / factor, and between, (1 - s)·θ_i/factor + s·θ_i with
    s = (L_orig/λ - low_freq_factor) / (high_freq_factor - low_freq_factor) (Meta 2024)."""
    inv_freq = default_inv_freq(rotary_dim, base, device=device)
    original = original_max_position_embeddings
    longest, shortest = original / low_freq_factor, original / high_freq_factor  # wavelengths
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelength > longest, inv_freq / factor, inv_freq)
    is_medium = (wavelength >= shortest) & (wavelength <= longest)
    return torch.where(is_medium, smoothed, scaled), 1.0


def longrope_scaling(
    head_dim,
    rotary_dim,
    base,
    seq_len=None,
    device=None,
    *,
    short_factor: Sequence[float],
    long_factor: Sequence[float],
    original_max_position_embeddings,
    factor,
    attention_factor=None,
):
    """LongRoPE (Ding et al. 2024, arXiv:2402.13753; Phi-3): θ_i / short_factor_i up to
    L_orig, θ_i / long_factor_i beyond; attention factor sqrt(1 + ln(factor)/ln(L_orig)).
    The choice follows seq_len, so keys cached before the switch keep the short factors."""
    original = original_max_position_embeddings
    for name, factors in (("long_factor", long_factor), ("short_factor", short_factor)):
        if len(factors) != rotary_dim // 2:
            raise ValueError(
                f"longrope {name} has {len(factors)} entries but the rotary dimension "
                f"{rotary_dim} has {rotary_dim // 2} pairs"
            )
    if attention_factor is None and factor <= 1:
        attention_factor = 1.0
    elif attention_factor is None:
        attention_factor = math.sqrt(1 + math.log(factor) / math.log(original))
    if isinstance(seq_len, torch.SymInt):  # a dynamic length: the choice made in the program
        long = torch.tensor(long_factor, device=device, dtype=torch.float64)
        short = torch.tensor(short_factor, device=device, dtype=torch.float64)
        ext = torch.where(traced_length(seq_len, device) > original, long, short)
    else:
        factors = long_factor if seq_len is not None and seq_len > original else short_factor
        ext = torch.tensor(factors, device=device, dtype=torch.float64)
    return default_inv_freq(rotary_dim, base, device=device) / ext, attention_factor


def proportional_scaling(head_dim, rotary_dim, base, seq_len=None, device=None, *, factor=1.0):
    """Proportional (Hugging Face, Gemma): the first rotary_dim/2 pairs use
    base^(-2i/head_dim), the others do not rotate; all divided by factor."""
    # the rotated pairs take their exponent over the whole head; the remaining pairs of the
    # head get frequency 0 (no rotation), so this scaling always covers head_dim
    rotated = default_inv_freq(rotary_dim, base, denominator=head_dim, device=device)
    still = torch.zeros(head_dim // 2 - rotary_dim // 2, device=device, dtype=torch.float64)
    return torch.cat((rotated, still)) / factor, 1.0


ScalingFn = Callable[..., tuple[torch.Tensor, float]]

#: rope_type -> fn(head_dim, rotary_dim, base, seq_len, device, **params)
ROPE_SCALINGS: dict[str, ScalingFn] = {
    "default": default_scaling,
    "linear": linear_scaling,
    "ntk": ntk_scaling,
    "dynamic": dynamic_scaling,
    "ntk_alpha": ntk_alpha_scaling,
    "ntk_mixed": ntk_mixed_scaling,
    "yarn": yarn_scaling,
    "llama3": llama3_scaling,
    "longrope": longrope_scaling,
    "proportional": proportional_scaling,
}


def scaling_keys(rope_type: str) -> tuple[list[str], list[str]]:
    """The parameter keys of the scaling ``rope_type``: its function's keyword-only arguments.

    Returns:
        ``(required, accepted)``, each in declaration order.

    Raises:
        ValueError: ``rope_type`` is not a key of :data:`ROPE_SCALINGS` (the message names
            the accepted ones).
    """
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"unknown rope_type {rope_type!r}; accepted: {sorted(ROPE_SCALINGS)}")
    params = inspect.signature(ROPE_SCALINGS[rope_type]).parameters.values()
    accepted = [p for p in params if p.kind is p.KEYWORD_ONLY]
    required = [p.name for p in accepted if p.default is p.empty]
    return required, [p.name for p in accepted]

"""Decoding: sampling one token, the position of the next one, and the generate loop of
:meth:`TransformerLM.generate <posenc.models.TransformerLM.generate>`, which calls
:func:`generate` here (documented here, once), for any model with what :class:`Decoder`
asks.

With a KV cache each step runs only the new token against the cached keys and values, as
in every incremental decoder since the Transformer (Vaswani et al. 2017).
"""

from __future__ import annotations

import math
from typing import Protocol, cast

import torch

from ..arguments import check_float, check_generator, check_tensor
from ..attn import KVCache
from ..config import check_bool, check_int
from ..positions import from_padding
from .inputs import check_input_ids, check_mask

__all__ = [
    "COMPILE_MODES",
    "Decoder",
    "check_compile",
    "check_sampling",
    "check_temperature",
    "generate",
    "next_positions",
    "sample",
]


class Decoder(Protocol):
    """What :func:`generate` needs of a model (:class:`~posenc.models.TransformerLM` has it):
    logits for token ids at positions, optionally after a :class:`~posenc.attn.KVCache`,
    and the sizes and encodings to check the prompt against."""

    @property
    def causal(self) -> bool:
        """Whether each token sees only the tokens before it (generation needs it)."""
        ...

    @property
    def vocab_size(self) -> int:
        """The number of token ids: ids are in ``[0, vocab_size)``."""
        ...

    def check_positions(
        self, positions: torch.Tensor, *, seq_len: int | None = None, batch: int | None = None
    ) -> torch.Tensor:
        """The prompt's positions checked by every positional encoding of the model, as it
        computes with them (:meth:`posenc.base.Encoding.check_positions`)."""
        ...

    def new_cache(self, batch: int, max_seq_len: int, *, static: bool = False) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``max_seq_len`` tokens (static:
        a :class:`~posenc.attn.StaticKVCache`)."""
        ...

    def __call__(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[batch, seq, vocab_size]`` for ids ``[batch, seq]``."""
        ...


@torch.no_grad()
def generate(
    model: Decoder,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    *,
    attention_mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    compile: bool | str = False,
) -> torch.Tensor:
    """Continue ``input_ids`` by ``max_new_tokens`` tokens of ``model``.

    ``temperature=0`` is greedy decoding. With ``use_cache`` each step runs only the new
    token against cached keys and values, and gives the same tokens as recomputing the
    whole sequence (``use_cache=False``), except for RoPE scalings whose frequencies
    follow the current length (``dynamic``, ``longrope``) past their original length:
    cached keys keep the frequencies they were rotated with, as in transformers.

    Args:
        model: a causal model (:class:`Decoder`), e.g. a
            :class:`~posenc.models.TransformerLM` built with ``causal=True``.
        input_ids: the prompts, token ids in ``[0, vocab_size)``.
        max_new_tokens: how many tokens to add (>= 0).
        temperature: 0 for greedy decoding, else the softmax temperature (finite, > 0).
        top_k: sample among the ``top_k`` most likely tokens only (None: all).
        use_cache: decode with a :class:`~posenc.attn.KVCache` (one token per step).
        generator: the random generator of the sampling.
        attention_mask: ``[batch, seq]``, 0 for the pads of a (left-)padded batch of
            prompts: each prompt then generates what it generates alone.
        positions: the prompt's positions (``[seq]``, ``[batch, seq]``, or M-RoPE's
            ``[3, batch, seq]`` from :func:`posenc.positions.multimodal`); each new
            token takes the next one after the largest (for M-RoPE on every axis, as
            text: :func:`next_positions`). Default: ``arange``, or counted over real
            tokens with ``attention_mask``.
        compile: decode with ``torch.compile(model, fullgraph=True)`` over a
            :class:`~posenc.attn.StaticKVCache` (needs ``use_cache``): the prompt and the
            one-token step are compiled once each, whatever the number of tokens; the
            tokens are those of the eager decode. True, or a ``torch.compile`` mode
            (:data:`COMPILE_MODES`): ``"reduce-overhead"`` replays each step as a CUDA
            graph on a GPU (the cache's tensors keep their addresses: the step writes
            them in place), so the step's host work is one launch; on a CPU it compiles
            as ``"default"``.

    Returns:
        the prompts followed by the new tokens.

    Shapes:
        input_ids: ``[batch, seq]`` -> ``[batch, seq + max_new_tokens]``.
    """
    if not model.causal:
        raise ValueError("generate() needs a causal model (causal=True)")
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    check_bool("use_cache", use_cache)
    mode = check_compile(compile)
    if mode is not None and not use_cache:
        raise ValueError(
            f"compile={compile!r} decodes over a static KV cache: it needs use_cache=True"
        )
    check_sampling(temperature, top_k, generator)
    input_ids = check_input_ids(input_ids, model.vocab_size)
    b, s = input_ids.shape
    mask = None
    if attention_mask is not None:
        mask = check_mask("attention_mask", attention_mask, b, s)
    if positions is None and mask is not None:
        positions = from_padding(mask)
    if positions is not None:
        positions = model.check_positions(positions, seq_len=s, batch=b)
    cache = None
    if use_cache:
        cache = model.new_cache(b, s + max_new_tokens, static=mode is not None)
    step = model
    if mode is not None:
        step = cast(Decoder, torch.compile(model, fullgraph=True, mode=mode))
    if mode is not None and mask is not None:  # one shape for every step: every slot
        mask = torch.cat((mask, mask.new_ones(b, max_new_tokens)), dim=1)
    tokens, step_ids, step_positions = input_ids, input_ids, positions
    for _ in range(max_new_tokens):
        if use_cache:
            if mode is not None:  # a new step: CUDA graphs may reuse the last's outputs
                torch.compiler.cudagraph_mark_step_begin()
            logits = step(step_ids, step_positions, cache, attention_mask=mask)
        else:
            logits = model(tokens, positions, attention_mask=mask)
        next_token = sample(logits[:, -1], temperature, top_k, generator)  # [b, 1]
        tokens = torch.cat((tokens, next_token), dim=1)
        step_ids = next_token
        if mask is not None and mode is None:
            mask = torch.cat((mask, mask.new_ones(b, 1)), dim=1)
        if positions is not None:
            step_positions = next_positions(positions)
            positions = torch.cat((positions, step_positions), dim=-1)
    return tokens


#: the ``compile=`` modes :func:`generate` takes: ``torch.compile``'s
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_compile(compile: object) -> str | None:
    """The ``torch.compile`` mode of :func:`generate`'s ``compile`` (True: ``"default"``),
    or None for False; a ``TypeError`` or ``ValueError`` naming ``compile`` for anything
    else than a bool or one of :data:`COMPILE_MODES`.

    Example:
        >>> check_compile(True), check_compile("reduce-overhead"), check_compile(False)
        ('default', 'reduce-overhead', None)
    """
    if isinstance(compile, bool):
        return "default" if compile else None
    if not isinstance(compile, str):
        raise TypeError(
            f"compile must be a bool or a torch.compile mode {list(COMPILE_MODES)}, got "
            f"{type(compile).__name__}"
        )
    if compile not in COMPILE_MODES:
        raise ValueError(
            f"compile must be True, False or one of {list(COMPILE_MODES)}, got {compile!r}"
        )
    return compile


def next_positions(positions: torch.Tensor) -> torch.Tensor:
    """The position of the token after ``positions``: one past the largest, per sequence.

    M-RoPE's ``[3, batch, seq]`` ids continue as text (the same id on every axis) after
    the largest id of any axis, as Qwen2-VL's decoding does.

    Shapes:
        ``[seq]`` -> ``[1]``; ``[batch, seq]`` -> ``[batch, 1]``;
        ``[3, batch, seq]`` -> ``[3, batch, 1]``.
    """
    check_tensor("positions", positions, kinds=("int", "float"), dims=(1, 2, 3))
    if positions.shape[-1] == 0:
        raise ValueError("positions must hold at least one position per sequence, got none")
    if positions.dim() == 3:  # M-RoPE: the largest id over the axes, [b] -> [3, b, 1]
        return (positions.amax(dim=(0, 2)) + 1).view(1, -1, 1).expand(positions.shape[0], -1, 1)
    return positions.amax(dim=-1, keepdim=True) + 1


def check_temperature(temperature: float) -> None:
    """Raise unless ``temperature`` is 0 (greedy) or a number > 0 of a magnitude in
    ``[1 / MAX_FLOAT, MAX_FLOAT]`` (:func:`~posenc.arguments.check_float`): the logits
    divided by it stay finite, a NaN or an inf never samples."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    check_float("temperature", temperature, positive=False)


def check_sampling(
    temperature: float, top_k: int | None, generator: torch.Generator | None
) -> None:
    """Raise a ``TypeError`` or ``ValueError`` naming the argument unless these can
    :func:`sample`: a temperature (:func:`check_temperature`), ``top_k`` an int >= 1 or
    None (checked at every temperature: greedy ignores it, but never a wrong one), and a
    ``torch.Generator`` or None."""
    check_temperature(temperature)
    if top_k is not None:
        check_int("top_k", top_k)
    check_generator(generator)


def sample(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of ``logits``: greedy at ``temperature=0``, else from the softmax
    at that temperature, optionally restricted to the ``top_k`` best.

    Shapes:
        logits: ``[batch, vocab]`` (floating point) -> ``[batch, 1]``.
    """
    check_tensor("logits", logits, dims=(2,))
    if logits.shape[-1] == 0:
        raise ValueError("logits must hold at least one token per row, got a vocabulary of 0")
    check_sampling(temperature, top_k, generator)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)

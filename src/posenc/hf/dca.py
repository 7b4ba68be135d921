"""Dual Chunk Attention read from a Hugging Face config's ``dual_chunk_attention_config``
(Qwen2.5-7B/14B-Instruct-1M: ``{"chunk_size": 262144, "local_size": 8192,
"original_max_position_embeddings": 262144}``; An et al. 2024, arXiv:2402.17463).

transformers does not read the key: it runs these checkpoints as plain RoPE over full
attention. vLLM and SGLang read it and rotate with the plain ``rope_theta``, ignoring any
``rope_scaling``; so a config with both is refused here, as the engines would run two
different models from it. The ``sparse_attention_*`` keys choose which scores vLLM's
prefill computes above a length (MInference's vertical-and-slash pattern): an
approximation of the attention, not a positional plan. posenc computes the dense attention
and reports them (:func:`dca_notes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import check_int
from ..rotary.dca import DualChunkRoPE

__all__ = ["DCA_KEYS", "SPARSE_KEYS", "dca_from_hf", "dca_notes"]

#: the keys of ``dual_chunk_attention_config`` that set the positional plan
DCA_KEYS = ("chunk_size", "local_size", "original_max_position_embeddings")
#: the keys of vLLM's sparse prefill, read as a note (see the module)
SPARSE_KEYS = (
    "sparse_attention_config",
    "sparse_attention_enabled",
    "sparse_attention_threshold",
    "sparse_attention_last_q",
)


def dca_from_hf(
    dca: Any, *, head_dim: int, params: dict[str, Any], layout: str, rotary_dim: int | None
) -> DualChunkRoPE:
    """The ``dca`` encoding of ``dual_chunk_attention_config`` ``dca``, with the config's
    head size, RoPE dict ``params`` (its ``rope_theta`` and ``partial_rotary_factor``; any
    scaling refused), pair ``layout`` and ``rotary_dim``.

    Raises:
        ValueError: a key posenc does not know, a missing ``chunk_size`` or
            ``local_size``, or a RoPE scaling beside the chunks, named.
    """
    _check_mapping(dca)
    unknown = sorted(set(dca) - set(DCA_KEYS) - set(SPARSE_KEYS))
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} in dual_chunk_attention_config; posenc reads "
            f"{list(DCA_KEYS)} and notes {list(SPARSE_KEYS)}"
        )
    _check_sizes(dca)
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(
            f"the config sets both dual_chunk_attention_config and rope_type {rope_type!r}: "
            "vLLM and SGLang rotate with the plain rope_theta when the chunks are set, "
            "transformers scales and ignores the chunks, so the engines run different models"
        )
    return DualChunkRoPE(
        head_dim=head_dim,
        base=params.get("rope_theta"),
        partial_rotary_factor=params.get("partial_rotary_factor"),
        rotary_dim=rotary_dim,
        layout=layout,
        chunk_size=dca["chunk_size"],
        local_size=dca["local_size"],
        original_max_position_embeddings=dca.get("original_max_position_embeddings"),
    )


def dca_notes(dca: Mapping[str, Any]) -> list[str]:
    """What ``posenc inspect`` says of a ``dual_chunk_attention_config`` ``dca``: the
    chunks, which engines run them, and vLLM's sparse prefill where it is configured
    (``sparse_attention_config`` given and not disabled).

    Raises:
        TypeError, ValueError: ``dca`` not a dict, or its sizes missing or not ints, named.
    """
    _check_mapping(dca)
    _check_sizes(dca)
    size, local = dca["chunk_size"], dca["local_size"]
    original = dca.get("original_max_position_embeddings")
    tempered = "" if original is None else f"; q and k tempered past {original} tokens"
    notes = [
        f"dual chunk attention: chunk_size {size}, local_size {local} (chunks of "
        f"{size - local} positions): no query-key distance exceeds {size}{tempered}. vLLM "
        "and SGLang run it; transformers ignores dual_chunk_attention_config and runs plain "
        "RoPE over full attention"
    ]
    if dca.get("sparse_attention_config") and dca.get("sparse_attention_enabled") is not False:
        threshold = dca.get("sparse_attention_threshold", 32768)
        notes.append(
            f"vLLM prefills prompts over {threshold} tokens with sparse attention (MInference's "
            "vertical-and-slash pattern), an approximation; posenc computes the dense attention"
        )
    return notes


def _check_mapping(dca: Any) -> None:
    if not isinstance(dca, Mapping):
        raise TypeError(f"dual_chunk_attention_config must be a dict, got {type(dca).__name__}")


def _check_sizes(dca: Mapping[str, Any]) -> None:
    """Raise naming the key unless ``dca`` has int ``chunk_size`` and ``local_size`` (vLLM's
    defaults, 8192 and 1024, are not guessed) and ``original_max_position_embeddings`` is
    None or an int >= 1 (0 is no length, not an absent one)."""
    for key in ("chunk_size", "local_size"):
        if dca.get(key) is None:
            raise ValueError(f"dual_chunk_attention_config has no {key}")
        check_int(f"dual_chunk_attention_config {key}", dca[key], minimum=0)
    original = dca.get("original_max_position_embeddings")
    if original is not None:
        check_int("dual_chunk_attention_config original_max_position_embeddings", original)

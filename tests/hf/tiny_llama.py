"""A tiny transformers Llama and the scalings every Hugging Face test rotates with: the
configs, the model, posenc's RoPE put in its place, and the rounding bounds of comparing
them (transformers forms its angles in float32, posenc in float64).

Imported by the tests of :mod:`posenc.hf` as ``tests.hf.tiny_llama`` (pytest's
``pythonpath`` holds the repository root); it needs transformers.
"""

import math

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from posenc.rotary import RoPE

HEAD_DIM = 16  # of the tiny model: hidden 64, 4 heads
SEQ = 40  # longer than the tiny model's original length, 16


def long_factors(n):
    return [1.0 + 0.05 * i for i in range(n)], [1.0 + 1.5 * i for i in range(n)]


def scalings(original, head_dim):
    """rope_parameters of every scaling transformers runs, with original length ``original``."""
    short, long = long_factors(head_dim // 2)
    return {
        "default": {"rope_type": "default"},
        "linear": {"rope_type": "linear", "factor": 4.0},
        "dynamic": {"rope_type": "dynamic", "factor": 4.0},
        "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": original},
        "yarn-deepseek": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": original,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
        "yarn-attention-factor": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": original,
            "attention_factor": 1.1,
            "truncate": False,
        },
        "llama3": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": original,
        },
        "longrope": {
            "rope_type": "longrope",
            "short_factor": short,
            "long_factor": long,
            "original_max_position_embeddings": original,
        },
    }


def max_positions(rope_parameters, original):
    """``max_position_embeddings`` as a real config sets it: the original length for dynamic
    (transformers scales past it), the extended one for the others."""
    if rope_parameters["rope_type"] in ("default", "dynamic"):
        return original
    return int(original * rope_parameters.get("factor", 4.0))


def llama_config(
    rope_parameters, original=16, head_dim=HEAD_DIM, base=10000.0, max_position_embeddings=None
):
    """A tiny Llama config; ``rope_theta`` in ``rope_parameters`` wins over ``base``."""
    if max_position_embeddings is None:
        max_position_embeddings = max_positions(rope_parameters, original)
    return LlamaConfig(
        hidden_size=4 * head_dim,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_theta": base, **rope_parameters},
    )


SCALINGS = scalings(16, HEAD_DIM)


def hf_table_n(base):
    """transformers forms its angles in float32: frequencies 1 / base^(2i/d) off by about
    (ln(base)/2 + 2)·eps relatively (a rounded exponent of a large power), times the
    position (one rounding more); then cos/sin and the attention factor (two). posenc's
    tables are float64 angles rounded once. So a table entry is off by at most
    ``hf_table_n(base)·eps·factor·max(1, |angle|)``."""
    return math.log(base) / 2 + 5


def hf_rotation_tol(tol, base, largest_angle, factor, *xs):
    """Rotations of x by transformers' tables and by posenc's: the tables' error times
    |x1| + |x2| <= 2·max|x|, and the rotation's own three roundings."""
    size = 2 * factor * max(1.0, largest_angle) * max(x.abs().max().item() for x in xs)
    return tol(n=hf_table_n(base) + 3, scale=size)


def llama_tol(tol, config, seq, logits):
    """The logits of a tiny Llama with transformers' tables and with posenc's: an estimate,
    as for model_tol. A layer sums over its norms and projections (4·hidden + 3·intermediate
    terms), the scores (head_dim, with q and k off by the tables' error at angles up to
    seq) and the softmax and weighted values (seq each); the head sums 2·hidden more."""
    base = config.rope_parameters["rope_theta"]
    per_layer = 4 * config.hidden_size + 3 * config.intermediate_size + config.head_dim
    per_layer += 2 * seq + 4 * hf_table_n(base) * seq
    n = config.num_hidden_layers * per_layer + 2 * config.hidden_size
    return tol(n=n, scale=logits.abs().max().item())


class PosencRotary(nn.Module):
    """posenc standing in for ``model.model.rotary_emb`` of a transformers Llama.

    The Llama model calls ``rotary_emb(hidden_states, position_ids=position_ids)`` once per
    forward and hands the result to every layer's ``apply_rotary_pos_emb``. It expects cos
    and sin ``[batch, seq, head_dim]`` in the half layout's duplicated format: the n =
    head_dim / 2 per-pair values written twice, ``cat([c, c])``, in the activations' dtype.
    posenc's ``rotation`` gives ``[batch, seq, n]`` (the attention factor included).
    """

    def __init__(self, rope: RoPE) -> None:
        super().__init__()
        self.rope = rope

    def forward(self, x, position_ids):
        cos, sin = self.rope.rotation(position_ids)  # [b, s, n]
        return torch.cat((cos, cos), dim=-1).to(x.dtype), torch.cat((sin, sin), dim=-1).to(x.dtype)


def tiny_model(config):
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@torch.no_grad()
def logits_with_posenc(model, ids, rope):
    """The model's logits with its rotary embedding swapped for posenc's, then restored."""
    own = model.model.rotary_emb
    model.model.rotary_emb = PosencRotary(rope)
    try:
        return model(ids).logits
    finally:
        model.model.rotary_emb = own

"""Tiny, unscaled transformers configs of every model type the Hugging Face tests build:
the layer-plan families of ``tests/hf/test_layer_plan.py`` (their RoPE set back to unscaled,
so a context extension applies), Llama, Phi-3, GPT-NeoX, and three composite configs
(Qwen2.5-VL, Gemma 3, Llama 4); and the tiny random model of each (no downloads).

Imported as ``tests.hf.families``; needs transformers.
"""

import warnings

import torch
import transformers
from tests.hf.test_layer_plan import FAMILIES, KV, TINY

T = transformers

#: a vision tower as small as each composite config takes
_VISION = {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1}
_VISION |= {"num_attention_heads": 2, "image_size": 28, "patch_size": 14}


def _unscaled(params):
    """A RoPE dict (or a per-layer-type one) with its base and rotary fraction kept and its
    scaling dropped."""
    if all(isinstance(v, dict) for v in params.values()):
        return {k: _unscaled(v) for k, v in params.items()}
    kept = {k: params[k] for k in ("rope_theta", "partial_rotary_factor") if k in params}
    return {"rope_type": "default", **kept}


def _family(name):
    cls, kwargs = FAMILIES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(T, cls)(**kwargs)
        return getattr(T, cls)(**{**kwargs, "rope_parameters": _unscaled(config.rope_parameters)})


def _text(**extra):
    return {**TINY, **KV, "num_hidden_layers": 2, **extra}


def _others():
    """name -> config factory, beside the layer-plan families."""
    vision = dict(_VISION)
    return {
        "llama": lambda: T.LlamaConfig(**_text(max_position_embeddings=64)),
        "phi3": lambda: T.Phi3Config(
            **_text(max_position_embeddings=64, original_max_position_embeddings=64)
        ),
        "gpt_neox": lambda: T.GPTNeoXConfig(
            vocab_size=64,
            hidden_size=64,
            intermediate_size=64,
            num_attention_heads=4,
            num_hidden_layers=2,
            rotary_pct=0.5,
            max_position_embeddings=64,
        ),
        "qwen2_5_vl": lambda: T.Qwen2_5_VLConfig(
            text_config=_text(
                max_position_embeddings=64,  # M-RoPE sections of its 8 pairs
                rope_parameters={
                    "rope_type": "default",
                    "rope_theta": 1e6,
                    "mrope_section": [2, 3, 3],
                },
            ),
            vision_config={
                "depth": 1,
                "hidden_size": 32,
                "num_heads": 2,
                "out_hidden_size": 64,
                "intermediate_size": 32,
            },
        ),
        "gemma3": lambda: T.Gemma3Config(
            text_config=_text(head_dim=16, sliding_window=4, max_position_embeddings=64),
            vision_config=vision,
            mm_tokens_per_image=4,
        ),
        "llama4": lambda: T.Llama4Config(
            text_config=_text(
                head_dim=16,
                intermediate_size_mlp=64,
                num_local_experts=2,
                max_position_embeddings=64,
                rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            ),
            vision_config={
                **vision,
                "vision_output_dim": 32,
                "projector_input_dim": 32,
                "projector_output_dim": 32,
            },
        ),
    }


#: every model type built: name -> a function that makes its tiny config
CONFIGS = {**{name: (lambda n=name: _family(n)) for name in FAMILIES}, **_others()}

#: the composite ones, whose rotary embedding reads a sub-config
COMPOSITE = ("qwen2_5_vl", "gemma3", "llama4")


def make(name):
    """The tiny config of ``name``, warnings of its class silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CONFIGS[name]()


def build(config):
    """The tiny random model of ``config``, in eval mode: its causal LM, else its
    image-text-to-text model, else its masked LM (ModernBERT)."""
    torch.manual_seed(0)
    autos = (T.AutoModelForCausalLM, T.AutoModelForImageTextToText, T.AutoModelForMaskedLM)
    for auto in autos:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return auto.from_config(config).eval()
        except ValueError:  # this auto class has no model for the config
            continue
    raise AssertionError(f"no tiny model for {type(config).__name__}")

"""Hugging Face interop: read a model's RoPE from its config, extend a loaded model's context.

One module per concept:

- :mod:`~posenc.hf.records`: one record per model type (:class:`~posenc.hf.records.ModelType`:
  its pair layout, rotary dims, M-RoPE split, layer-plan family, composite text model,
  the keys a ``config.json`` must give, another encoding, a refusal), in one registry;
- :mod:`~posenc.hf.rope`: :func:`rope_from_hf_config`, a transformers config (the object
  or its ``config.json`` dict) as the :class:`~posenc.rotary.RoPE` that reproduces the
  model's rotary embedding;
- :mod:`~posenc.hf.latent`: :func:`latent_rope_from_hf_config`, a multi-head latent
  attention model's (DeepSeek-V2/V3) decoupled RoPE and softmax scale as a
  :class:`~posenc.rotary.LatentRoPE`;
- :mod:`~posenc.hf.layouts`: :func:`pair_layout`, the rotary pairs each model type's code
  rotates, read off transformers (never a guess);
- :mod:`~posenc.hf.mrope`: the M-RoPE keys of a config, how a split fits interleaved
  sections, and where a multimodal config keeps its language model's;
- :mod:`~posenc.hf.dca`: ``dual_chunk_attention_config`` (Qwen2.5-1M) read as ``dca``, as
  vLLM and SGLang run it;
- :mod:`~posenc.hf.keys`: reading a config's keys, object or dict, strictly
  (:class:`~posenc.hf.keys.ConfigKeys`);
- :mod:`~posenc.hf.deepseek_v4`: a DeepSeek-V4 config's flat RoPE keys folded into its
  ``main`` and ``compress`` RoPEs, as transformers' config class folds them;
- :mod:`~posenc.hf.layer_plan`: :func:`layer_plan`, a config's positional plan layer by
  layer (windows, chunks, NoPE layers, sinks, softcaps, Llama 4's temperature), with
  :func:`score_scale` and :func:`is_causal` for what a plan does not hold;
- :mod:`~posenc.hf.families`: how each family's layers read, one file per family;
- :mod:`~posenc.hf.apply`: :func:`apply`, posenc inside a loaded transformers model in one
  call (exact rotary, posenc's attention, another encoding in place of RoPE), and
  :func:`undo`;
- :mod:`~posenc.hf.exact_rotary`: :class:`~posenc.hf.exact_rotary.ExactRotaryEmbedding`, a
  model's rotary embedding computed from float64 angles, checked against the module it
  replaces;
- :mod:`~posenc.hf.swap`: another encoding in place of RoPE, layer by layer (NoPE, a bias
  encoding, RoPE or p-RoPE of other settings);
- :mod:`~posenc.hf.triton_rotation`: ``kernel="triton"``, a model type's rotation by posenc's
  Triton kernel;
- :mod:`~posenc.hf.backend`: ``attn_implementation="posenc"``, :func:`posenc.attention` as a
  transformers attention function (:func:`register_attention`);
- :mod:`~posenc.hf.extend`: :func:`extend_context`, a loaded model (a causal LM of the
  Llama family, GPT-NeoX, Qwen-VL, Gemma 3, ...) rewritten for a longer context with one
  of the published scalings its config class takes, in a config that saves and loads;
- :mod:`~posenc.hf.rescale`: a model that ships scaled (Llama 3.1's ``llama3``, YaRN, linear,
  dynamic) extended by a larger factor over the same original length;
- :mod:`~posenc.hf.inspect`: :func:`inspect_checkpoint`, what a checkpoint's
  ``config.json`` says about its positions, the extension plans of its report and the
  report shown (:func:`render_report`, :func:`frequencies_figure`); and
  :mod:`~posenc.hf.checkpoint`, the report's old path.

:func:`permute_for_layout` (the q/k weight permutation between Meta's interleaved pairs and
Hugging Face's halves) lives in :mod:`posenc.rotary.layouts` and is re-exported here.

transformers is optional: nothing here imports it, so ``import posenc.hf`` works without it.
Every function duck-types the config and the model. Import the names from ``posenc.hf``.
"""

from ..rotary.layouts import permute_for_layout
from .apply import apply, undo
from .backend import register as register_attention
from .extend import EXTEND_METHODS, extend_context, extension_updates
from .inspect.checkpoint import CheckpointReport, inspect_checkpoint
from .inspect.view import frequencies_figure, render_report
from .latent import latent_rope_from_hf_config
from .layer_plan import is_causal, layer_plan, score_scale
from .rope import rope_from_hf_config

__all__ = [
    "EXTEND_METHODS",
    "CheckpointReport",
    "apply",
    "extend_context",
    "extension_updates",
    "frequencies_figure",
    "inspect_checkpoint",
    "is_causal",
    "latent_rope_from_hf_config",
    "layer_plan",
    "permute_for_layout",
    "register_attention",
    "render_report",
    "rope_from_hf_config",
    "score_scale",
    "undo",
]

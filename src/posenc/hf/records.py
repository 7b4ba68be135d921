"""One record per Hugging Face model type: everything posenc has read off transformers'
code about it, in one registry (:data:`MODEL_TYPES`, :func:`model_type`).

A :class:`ModelType` holds the pairs its rotary embedding rotates (``layout``), whether
it reads GPT-J's leading ``rotary_dim``, its M-RoPE split (:class:`MRopeFamily`), the
family whose reader gives its layer plan (``family``: :mod:`posenc.hf.families`), the
model type of its language model when it is a composite config (``text``), the keys a
``config.json`` must give, the posenc encoding of a model that does not rotate, why
posenc refuses it, if it does, and the rope types its config class takes, where it takes
fewer than transformers runs. Every reader of a config asks here (pair layouts, rotary
dims, M-RoPE, layer plans, checkpoint reports), so a new model type is one record and a
new layer-plan family one file of :mod:`posenc.hf.families` plus its record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

__all__ = [
    "MODEL_TYPES",
    "MRopeFamily",
    "ModelType",
    "check_not_refused",
    "model_type",
    "model_types",
]


class MRopeFamily(NamedTuple):
    """How one model type shares its pairs out between the temporal, height and width ids:
    ``interleaved`` and ``spatial_first`` as :class:`~posenc.rotary.mrope.MRopeConfig`
    names them, the ``section`` (t, h, w) its rotary embedding uses when the config has
    none, and ``order``: where the config's ``mrope_section`` lists t, h and w."""

    interleaved: bool
    section: tuple[int, int, int]
    spatial_first: bool = False
    order: tuple[int, int, int] = (0, 1, 2)


@dataclass(frozen=True)
class ModelType:
    """What posenc knows of one model type.

    Attributes:
        name: the ``model_type``.
        layout: the rotary pairs its code rotates: ``"half"`` (i, i + d/2), ``"interleaved"``
            (2i, 2i + 1), ``"by_flag"`` (multi-head latent attention: interleaved unless
            ``rope_interleave`` is False), or None (not read).
        latent: multi-head latent attention (DeepSeek-V2/V3: a decoupled RoPE head).
        rotary_dim: its code rotates the leading ``rotary_dim`` channels (GPT-J, CodeGen).
        mrope: its M-RoPE split, or None.
        family: the layer-plan reader's family (:mod:`posenc.hf.families`), or None (one
            RoPE on every layer, when the config sets no key that makes layers differ).
        text: a composite config's language model type (its ``text_config``), or None.
        required: keys a ``config.json`` must give (its class's default is not derived
            from the other keys: Gemma's ``head_dim`` of 256).
        encoding: the posenc encoding of a model without RoPE (``alibi``, ``t5``,
            ``learned``), or None.
        refused: why posenc's RoPE does not express its rotation, or None.
        plan_refused: why a posenc layer plan does not express its attention (its RoPE
            may still be read), or None.
        rotary_at: where its code's rotary channels sit in a head: ``"start"`` (the first
            ``rotary_dim``) or ``"end"`` (the last: DeepSeek-V4's ``[nope | rope]``).
        rope_types: the ``rope_type`` values its config class takes in a RoPE dict as
            :func:`~posenc.hf.extend_context` writes it, where it takes fewer than
            transformers' rotary embeddings run (Phi-3: ``default`` and ``longrope``); None:
            any. extend_context writes no other, so the config it writes saves and loads.
    """

    name: str
    layout: Literal["half", "interleaved", "by_flag"] | None = None
    latent: bool = False
    rotary_dim: bool = False
    mrope: MRopeFamily | None = None
    family: str | None = None
    text: str | None = None
    required: tuple[str, ...] = ()
    encoding: str | None = None
    refused: str | None = None
    plan_refused: str | None = None
    rotary_at: Literal["start", "end"] = "start"
    rope_types: tuple[str, ...] | None = None

    @property
    def rotary(self) -> bool:
        """Whether :func:`~posenc.hf.rope_from_hf_config` reads its rotary embedding."""
        return self.layout is not None or self.mrope is not None


#: pairs (i, i + d/2) of the rotary slice
# fmt: off
_HALF = [
    "afmoe", "apertus", "apertus1p5", "apertus1p5_text", "arcee", "aria", "aria_text", "bamba",
    "beam", "bitnet", "chameleon", "cosmos3_edge", "cosmos3_edge_text", "csm",
    "csm_depth_decoder_model", "cwm", "dbrx", "deepseek_ocr2", "deepseek_ocr2_encoder",
    "deepseek_ocr2_text", "dia", "dia_decoder", "dia_encoder", "diffllama", "doge", "dory",
    "dots1", "emu3", "emu3_text_model", "esmc", "eurobert", "exaone4", "exaone_moe", "falcon",
    "falcon_h1", "flex_olmo", "flint", "gemma", "gemma2", "gemma3", "gemma3_text", "glm4_moe",
    "glm4v_moe", "glm4v_moe_text", "glm_image", "glm_image_text", "glmasr", "glmasr_encoder",
    "gpt_neox", "gpt_neox_japanese", "gpt_oss", "gradium_phonon_tts", "granite",
    "granite_docling", "granite_docling_text", "granite_swa", "granitemoe", "granitemoe_swa",
    "granitemoehybrid", "granitemoeshared", "gte", "higgs_audio_v2", "hrm_text",
    "hunyuan_v1_dense", "hunyuan_v1_moe", "hy_v3", "hy_v4", "hyperclovax", "idefics", "jais2",
    "jetmoe", "jina_embeddings_v3", "kolibri1", "kyutai_speech_to_text", "laguna", "lara_mini",
    "lasr_encoder", "lfm2", "lfm2_moe", "llama", "mellum", "mimi", "mimi_decoder",
    "mimi_encoder", "mimo_v2_flash", "minicpm3", "minimax", "minimax_m2", "minimax_m3_vl",
    "minimax_m3_vl_text", "ministral", "ministral3", "mistral", "mixtral", "mllama",
    "mllama_text_model", "modernbert", "modernbert-decoder", "molmo2", "molmo2_text", "moshi",
    "muse_glimmer", "muse_glimmer_assistant", "muse_glimmer_text", "muse_spark",
    "muse_spark_text", "nemotron", "nemotron3_5_transcribe_asr_audio",
    "nemotron3_5_transcribe_word_timestamp", "nemotron3_diarization_audio", "neomme",
    "neucodec", "nomic_bert", "olmo", "olmo2", "olmo3", "olmo_hybrid", "olmoe", "paddleocr_vl",
    "paddleocr_vl_text", "persimmon", "phi", "phi3", "phi4_multimodal", "phimoe", "pocket_tts",
    "pocket_tts_audio_tokenizer", "pocket_tts_audio_tokenizer_decoder",
    "pocket_tts_audio_tokenizer_encoder", "qwen2", "qwen2_5_omni", "qwen2_5_omni_talker",
    "qwen2_5_omni_text", "qwen2_5_omni_thinker", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_moe",
    "qwen2_vl", "qwen2_vl_text", "qwen3", "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text",
    "qwen3_5_text", "qwen3_moe", "qwen3_next", "qwen3_omni_moe",
    "qwen3_omni_moe_talker_code_predictor", "qwen3_omni_moe_talker_text",
    "qwen3_omni_moe_text", "qwen3_omni_moe_thinker", "qwen3_vl", "qwen3_vl_moe",
    "qwen3_vl_moe_text", "qwen3_vl_text", "qwen4_exp", "qwen4_exp_text", "recurrent_gemma",
    "seed_oss", "smollm3", "solar_open", "stablelm", "starcoder2", "step3p5", "step3p7",
    "t5_gemma_module", "t5gemma", "t5gemma2", "t5gemma2_decoder", "t5gemma2_encoder",
    "t5gemma2_text", "timesfm2_5", "ultrabert", "unlimited_ocr", "unlimited_ocr_text",
    "vaultgemma", "voxtral_realtime", "voxtral_realtime_encoder", "voxtral_realtime_text",
    "xcodec2", "zamba2", "zaya",
]
# fmt: on
#: pairs (2i, 2i + 1) (GPT-J's and CodeGen's ``(x, sin, cos)`` apply: tests/hf); DeepSeek-V2
#: rotates complex pairs whatever ``rope_interleave`` says; DeepSeek-V3.2, AXK2 and dots3
#: rotate their rope slice so whatever the config says (their ``apply_rotary_pos_emb``
#: serves an indexer or an encoder)
# fmt: off
_INTERLEAVED = [
    "blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "blt_patcher",
    "codegen", "cohere", "cohere2", "cohere2_moe", "ernie4_5", "ernie4_5_moe",
    "ernie4_5_vl_moe", "ernie4_5_vl_moe_text", "glm", "glm4", "glm46v", "glm4v", "glm4v_text",
    "glm_ocr", "glm_ocr_text", "gptj", "helium", "hy_v4_vl", "hy_v4_vl_text", "llama4",
    "llama4_text", "moonshine", "moonshine_streaming", "pe_audio_encoder",
    "pe_audio_video_encoder", "pe_video_encoder", "deepseek_v2", "deepseek_v32", "axk2",
    "dots3_note", "dots3_note_text", "deepseek_v4",
]
# fmt: on
#: rotary channels at the end of each head, ``[nope | rope]`` (DeepSeek-V4's
#: ``apply_rotary_pos_emb`` turns ``x[..., -rope_dim:]``)
_ROTARY_AT_END = ["deepseek_v4"]
#: multi-head latent attention that reads ``rope_interleave`` (transformers' default True)
_BY_FLAG = ["deepseek_v3", "mistral4", "glm4_moe_lite", "youtu", "axk1"]

_SECTIONED = MRopeFamily(False, (16, 24, 24))
_GLM = MRopeFamily(False, (8, 12, 12))
_INTERLEAVED_MROPE = MRopeFamily(True, (24, 20, 20))
_QWEN3_5 = MRopeFamily(True, (11, 11, 10))
#: ERNIE's rotary embedding reads mrope_section (h, w, t), default [22, 22, 20]
_ERNIE = MRopeFamily(True, (20, 22, 22), spatial_first=True, order=(2, 0, 1))
#: M-RoPE: (model type, split, the suffixes of the composite's parts that carry it)
_MROPE = [
    ("qwen2_vl", _SECTIONED, ("", "_text")),
    ("qwen2_5_vl", _SECTIONED, ("", "_text")),
    ("qwen2_5_omni", _SECTIONED, ("", "_thinker", "_text", "_talker")),
    ("paddleocr_vl", _SECTIONED, ("", "_text")),
    ("glm4v", _GLM, ("", "_text")),
    ("glm4v_moe", _GLM, ("", "_text")),
    ("glm46v", _GLM, ("",)),
    ("glm_ocr", _GLM, ("", "_text")),
    ("glm_image", _GLM, ("", "_text")),
    ("qwen3_vl", _INTERLEAVED_MROPE, ("", "_text")),
    ("qwen3_vl_moe", _INTERLEAVED_MROPE, ("", "_text")),
    ("qwen3_omni_moe", _INTERLEAVED_MROPE, ("", "_thinker", "_text", "_talker_text")),
    ("cosmos3_edge", _INTERLEAVED_MROPE, ("", "_text")),
    ("hy_v4_vl", _INTERLEAVED_MROPE, ("", "_text")),
    ("qwen3_5", _QWEN3_5, ("", "_text")),
    ("qwen3_5_moe", _QWEN3_5, ("", "_text")),
    ("qwen4_exp", _QWEN3_5, ("", "_text")),
    ("ernie4_5_vl_moe", _ERNIE, ("", "_text")),
]
#: layer-plan family -> its model types (the reader: posenc/hf/families/<family>.py)
_FAMILIES = {
    "mistral": ["mistral", "mixtral"],
    "qwen2": ["qwen2", "qwen3"],
    "gemma2": ["gemma2"],
    "gemma3": ["gemma3_text"],
    "cohere2": ["cohere2"],
    "afmoe": ["afmoe"],
    "gpt_oss": ["gpt_oss"],
    "llama4": ["llama4_text"],
    "smollm3": ["smollm3"],
    "modernbert": ["modernbert"],
    "sliding_full": ["olmo3", "ministral", "cwm", "mellum", "laguna"],
    "exaone4": ["exaone4", "exaone_moe", "kolibri1"],
}
#: the classes whose head_dim defaults to a number (Gemma's 256), not hidden / heads
_HEAD_DIM_REQUIRED = [
    "qwen3",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "llama4_text",
    "afmoe",
    "cwm",
    "mellum",
    "laguna",
    "kolibri1",
    "deepseek_v4",
]
#: model types that do not rotate: the posenc encoding of each
_OTHER = {
    "bloom": "alibi",
    "t5": "t5",
    "mt5": "t5",
    "gpt2": "learned",
    "gpt_bigcode": "learned",
    "opt": "learned",
}

#: the rope types a config class takes, where it takes fewer than transformers' rotary
#: embeddings run (read off transformers 5.24; tests/hf/test_rope_types.py derives them again
#: from the transformers installed, for every model type it can build): Phi-3's and
#: Phi-4-multimodal's ``validate_rope`` take ``default`` and ``longrope`` (a ``yarn`` in a
#: config.json loads as ``longrope``); PhiMoE's wants ``short_mscale`` and ``long_mscale``
#: (its LongRoPE's) beside any type but ``default``; Cosmos3 Edge's takes ``default`` only;
#: RecurrentGemma's class has no ``max_position_embeddings``, which transformers reads for
#: the types with an original length (yarn, llama3, longrope)
_ROPE_TYPES = {
    "phi3": ("default", "longrope"),
    "phi4_multimodal": ("default", "longrope"),
    "phimoe": ("default",),
    "cosmos3_edge": ("default",),
    "cosmos3_edge_text": ("default",),
    "recurrent_gemma": ("default", "linear", "dynamic"),
}


#: why DeepSeek-V4 has no layer plan (its two RoPEs are read: rope_from_hf_config's
#: layer_type "main" and "compress")
_DEEPSEEK_V4_PLAN = (
    "every layer attends over a sliding window of raw keys, and its compressed layers also "
    "over compressed keys (CSA: 4 tokens per entry, a top-k indexer choosing the entries; "
    "HCA: 128 per entry) with a RoPE of their own; a posenc layer plan has windows and "
    "chunks of raw keys only"
)
#: why Hunyuan-VL's XD-RoPE is refused: the engines disagree (tests/rotary/test_xdrope.py)
_HUNYUAN_VL = (
    "its XD-RoPE (four M-RoPE sections) is rotated differently by the engines: "
    "transformers 5.24 turns the two halves of a pair by different axes' ids for an image "
    "token, vLLM and MLX-VLM turn both by one (text tokens agree); build vLLM's with "
    "posenc.create('mrope', mrope_section=(s_p, s_w, s_h, s_i), scaling={'rope_type': "
    "'ntk_alpha', 'alpha': a})"
)


def _build() -> dict[str, ModelType]:
    """The records, each model type's facts gathered from the lists above."""
    facts: dict[str, dict[str, Any]] = {}

    def add(names: Iterable[str], **fields: Any) -> None:
        for name in names:
            facts.setdefault(name, {}).update(fields)

    add(_HALF, layout="half")
    add(_INTERLEAVED, layout="interleaved")
    add(_BY_FLAG, layout="by_flag", latent=True)
    add(["deepseek_v2"], latent=True)
    add(["gptj", "codegen"], rotary_dim=True)
    add(_ROTARY_AT_END, rotary_at="end")
    for name, split, suffixes in _MROPE:
        add([name + suffix for suffix in suffixes], mrope=split)
    for family, names in _FAMILIES.items():
        add(names, family=family)
    add(_HEAD_DIM_REQUIRED, required=("head_dim",))
    add(["gemma3"], text="gemma3_text")
    add(["llama4"], text="llama4_text")
    for name, encoding in _OTHER.items():
        add([name], encoding=encoding)
    for name, rope_types in _ROPE_TYPES.items():
        add([name], rope_types=rope_types)
    add(["nanochat"], refused="its apply_rotary_pos_emb rotates by -θ (the sign of sin flipped)")
    add(["deepseek_v4"], plan_refused=_DEEPSEEK_V4_PLAN)
    add(["hunyuan_vl"], text="hunyuan_vl_text")
    add(["hunyuan_vl", "hunyuan_vl_text"], refused=_HUNYUAN_VL)
    return {name: ModelType(name, **fields) for name, fields in sorted(facts.items())}


#: model_type -> what posenc has read of it
MODEL_TYPES: dict[str, ModelType] = _build()


def model_type(name: Any) -> ModelType | None:
    """The record of ``name`` (a config's ``model_type``), None for one posenc has not read."""
    return MODEL_TYPES.get(name) if isinstance(name, str) else None


def check_not_refused(name: Any) -> None:
    """Raise ``ValueError`` naming ``name`` and why, where posenc refuses that model type."""
    record = model_type(name)
    if record is not None and record.refused is not None:
        raise ValueError(f"model_type {name!r}: {record.refused}; posenc refuses it")


def model_types(**where: Any) -> list[str]:
    """The model types whose records have every field of ``where`` (``layout="half"``,
    ``latent=True``, ...), sorted."""
    return sorted(
        name
        for name, record in MODEL_TYPES.items()
        if all(getattr(record, key) == value for key, value in where.items())
    )

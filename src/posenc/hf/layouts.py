"""The pair layout of each Hugging Face model type's RoPE, read from transformers' code.

A RoPE rotates pairs of channels, and which pairs is a fact of the model's code, not of its
config: ``"half"`` pairs ``(i, i + d/2)`` (GPT-NeoX, Llama), ``"interleaved"`` pairs
``(2i, 2i + 1)`` (GPT-J, Cohere, GLM). A wrong layout gives a model that runs and whose
attention is wrong, so posenc never guesses: a model type in none of the tables below is
an error that names it and asks for ``layout=``.

Each entry was read by rotating a basis vector with the family's own rotary embedding and
``apply_rotary_pos_emb`` (transformers 5.24) and seeing which coordinate it mixes with, and
in which direction; ``tests/test_hf_layouts.py`` reads them again from the transformers
installed (gpt-oss's half-width tables and Llama 4's complex ones:
``tests/test_hf_layer_plan.py``). Multi-head latent attention (DeepSeek-V2/V3 and the
models built on it) rotates a ``qk_rope_head_dim`` slice picked by ``rope_interleave``
(DeepSeek-V2's code always interleaves).
"""

from __future__ import annotations

from typing import Any

from ..config import check_bool

__all__ = ["HALF", "INTERLEAVED", "LATENT_ATTENTION", "MLA_BY_FLAG", "REFUSED", "pair_layout"]

#: model types whose RoPE rotates pairs (i, i + d/2) of its rotary slice
HALF: frozenset[str] = frozenset(
    """
    afmoe apertus apertus1p5 apertus1p5_text arcee aria aria_text bamba beam bitnet
    chameleon cosmos3_edge cosmos3_edge_text csm csm_depth_decoder_model cwm dbrx
    deepseek_ocr2 deepseek_ocr2_encoder deepseek_ocr2_text dia dia_decoder dia_encoder
    diffllama doge dory dots1 emu3 emu3_text_model esmc eurobert exaone4 exaone_moe falcon
    falcon_h1 flex_olmo flint gemma gemma2 gemma3 gemma3_text glm4_moe glm4v_moe
    glm4v_moe_text glm_image glm_image_text glmasr glmasr_encoder gpt_neox gpt_neox_japanese
    gpt_oss gradium_phonon_tts granite granite_docling granite_docling_text granite_swa
    granitemoe granitemoe_swa granitemoehybrid granitemoeshared gte higgs_audio_v2 hrm_text
    hunyuan_v1_dense hunyuan_v1_moe hy_v3 hy_v4 hyperclovax idefics jais2 jetmoe
    jina_embeddings_v3 kolibri1 kyutai_speech_to_text laguna lara_mini lasr_encoder lfm2
    lfm2_moe llama mellum mimi mimi_decoder mimi_encoder mimo_v2_flash minicpm3 minimax
    minimax_m2 minimax_m3_vl minimax_m3_vl_text ministral ministral3 mistral mixtral mllama
    mllama_text_model modernbert modernbert-decoder molmo2 molmo2_text moshi muse_glimmer
    muse_glimmer_assistant muse_glimmer_text muse_spark muse_spark_text nemotron
    nemotron3_5_transcribe_asr_audio nemotron3_5_transcribe_word_timestamp
    nemotron3_diarization_audio neomme neucodec nomic_bert olmo olmo2 olmo3 olmo_hybrid
    olmoe paddleocr_vl paddleocr_vl_text persimmon phi phi3 phi4_multimodal phimoe
    pocket_tts pocket_tts_audio_tokenizer pocket_tts_audio_tokenizer_decoder
    pocket_tts_audio_tokenizer_encoder qwen2 qwen2_5_omni qwen2_5_omni_talker
    qwen2_5_omni_text qwen2_5_omni_thinker qwen2_5_vl qwen2_5_vl_text qwen2_moe qwen2_vl
    qwen2_vl_text qwen3 qwen3_5 qwen3_5_moe qwen3_5_moe_text qwen3_5_text qwen3_moe
    qwen3_next qwen3_omni_moe qwen3_omni_moe_talker_code_predictor
    qwen3_omni_moe_talker_text qwen3_omni_moe_text qwen3_omni_moe_thinker qwen3_vl
    qwen3_vl_moe qwen3_vl_moe_text qwen3_vl_text qwen4_exp qwen4_exp_text recurrent_gemma
    seed_oss smollm3 solar_open stablelm starcoder2 step3p5 step3p7 t5_gemma_module t5gemma
    t5gemma2 t5gemma2_decoder t5gemma2_encoder t5gemma2_text timesfm2_5 ultrabert
    unlimited_ocr unlimited_ocr_text vaultgemma voxtral_realtime voxtral_realtime_encoder
    voxtral_realtime_text xcodec2 zamba2 zaya
    """.split()  # noqa: SIM905 (a list literal is one line per model type: 180 lines)
)
#: model types whose RoPE rotates pairs (2i, 2i + 1) (GPT-J's and CodeGen's ``(x, sin, cos)``
#: apply: tests/test_hf.py); DeepSeek-V3.2, AXK2 and dots3 rotate their rope slice so
#: whatever the config says (their ``apply_rotary_pos_emb`` serves an indexer or an encoder)
INTERLEAVED: frozenset[str] = frozenset(
    (
        "blt_global_transformer",
        "blt_local_decoder",
        "blt_local_encoder",
        "blt_patcher",
        "codegen",
        "cohere",
        "cohere2",
        "cohere2_moe",
        "ernie4_5",
        "ernie4_5_moe",
        "ernie4_5_vl_moe",
        "ernie4_5_vl_moe_text",
        "glm",
        "glm4",
        "glm46v",
        "glm4v",
        "glm4v_text",
        "glm_ocr",
        "glm_ocr_text",
        "gptj",
        "helium",
        "hy_v4_vl",
        "hy_v4_vl_text",
        "llama4",
        "llama4_text",
        "moonshine",
        "moonshine_streaming",
        "pe_audio_encoder",
        "pe_audio_video_encoder",
        "pe_video_encoder",
        "deepseek_v2",
        "deepseek_v32",
        "axk2",
        "dots3_note",
        "dots3_note_text",
    )
)
#: multi-head latent attention: interleaved when the config's ``rope_interleave`` is true
#: (transformers' default), else half
MLA_BY_FLAG: frozenset[str] = frozenset(
    ("deepseek_v3", "mistral4", "glm4_moe_lite", "youtu", "axk1")
)
#: every model type with multi-head latent attention: those of :data:`MLA_BY_FLAG` and
#: DeepSeek-V2, whose code rotates complex pairs (2i, 2i + 1) whatever ``rope_interleave`` says
LATENT_ATTENTION: frozenset[str] = MLA_BY_FLAG | {"deepseek_v2"}
#: model types whose rotation posenc's RoPE does not express, and why
REFUSED: dict[str, str] = {
    "nanochat": "its apply_rotary_pos_emb rotates by -θ (the sign of sin flipped)",
}


def pair_layout(model_type: Any, rope_interleave: Any = None, given: str | None = None) -> str:
    """``"half"`` or ``"interleaved"``: the pairs ``model_type``'s code rotates.

    Args:
        model_type: the config's ``model_type``.
        rope_interleave: the config's ``rope_interleave`` (multi-head latent attention
            only; None: transformers' default, True).
        given: the layout the caller read from the model's code, for a model type posenc
            has not read; for a known one it must agree.

    Raises:
        ValueError: for a model type posenc refuses, for one it has not read without
            ``given``, and for a ``given`` that is not a layout or contradicts the model
            type's, naming them.

    Example:
        >>> pair_layout("llama"), pair_layout("cohere"), pair_layout("deepseek_v3", False)
        ('half', 'interleaved', 'half')
        >>> pair_layout("my_model", given="interleaved")
        'interleaved'
    """
    if given is not None and given not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {given!r}")
    if model_type in REFUSED:
        raise ValueError(f"model_type {model_type!r}: {REFUSED[model_type]}; posenc refuses it")
    known = "interleaved" if model_type in INTERLEAVED else "half" if model_type in HALF else None
    if model_type in MLA_BY_FLAG:
        if rope_interleave is not None:
            check_bool("rope_interleave", rope_interleave)
        known = "half" if rope_interleave is False else "interleaved"
    if known is not None and given not in (None, known):
        raise ValueError(
            f"layout={given!r} contradicts model_type {model_type!r}, whose code rotates "
            f"{known!r} pairs"
        )
    layout = known if known is not None else given
    if layout is not None:
        return layout
    named = "a config without model_type" if model_type is None else f"model_type {model_type!r}"
    raise ValueError(
        f"posenc has not read the rotary pair layout of {named} from "
        "transformers' code, and a wrong one rotates the wrong channels without an error: "
        "pass layout='half' (pairs i, i + d/2: GPT-NeoX, Llama) or layout='interleaved' "
        "(pairs 2i, 2i + 1: GPT-J) as the model's apply_rotary_pos_emb does"
    )

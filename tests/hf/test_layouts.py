"""posenc.hf.layouts: the pair layout of every model type in its tables, read again from the
transformers installed (each family's own rotary embedding and apply function), and
rope_from_hf_config rotating as those functions do; a model type posenc has not read is an
error, never a default."""

from __future__ import annotations

import importlib
import inspect
import warnings

import pytest
import torch

from posenc.hf import rope_from_hf_config
from posenc.hf.layouts import pair_layout
from posenc.hf.records import MODEL_TYPES, model_types

HALF, INTERLEAVED = set(model_types(layout="half")), set(model_types(layout="interleaved"))
MLA_BY_FLAG = model_types(layout="by_flag")
REFUSED = {name: record.refused for name, record in MODEL_TYPES.items() if record.refused}

transformers = pytest.importorskip("transformers")


#: model types whose rotation the generic check cannot call, each checked against its own
#: functions: gpt-oss's half-width tables (tests/hf/test_layer_plan.py), GPT-J's and
#: CodeGen's ``apply_rotary_pos_emb(x, sin, cos)`` (tests/hf/test_rope.py)
OWN_CHECKS = ("gpt_oss", "gptj", "codegen")


def family(model_type: str, apply_name: str | None = None):
    """``(config, rotary embedding, apply function)`` of ``model_type``'s default config in
    transformers, or None where its modeling module has no such pair. The apply function is
    ``apply_name``, by default the one the attention uses: ``apply_rotary_pos_emb``, or
    ``apply_rotary_pos_emb_interleave`` where a latent-attention module has one and no
    ``rope_interleave`` flag to choose (its ``apply_rotary_pos_emb`` is the indexer's)."""
    if model_type not in transformers.CONFIG_MAPPING:
        return None
    cls = transformers.CONFIG_MAPPING[model_type]
    package = cls.__module__.split(".")[2]
    try:
        module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    except ImportError:
        return None
    embeddings = [
        c
        for name, c in vars(module).items()
        if name.endswith("RotaryEmbedding") and "Vision" not in name and inspect.isclass(c)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = cls()
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if apply_name is None:
        flagless = getattr(text, "rope_interleave", None) is None
        latent = hasattr(module, "apply_rotary_pos_emb_interleave") and flagless
        apply_name = "apply_rotary_pos_emb_interleave" if latent else "apply_rotary_pos_emb"
    apply = getattr(module, apply_name, None)
    if apply is None or not embeddings:
        return None
    return text, embeddings[0](config=text), apply


def cos_sin(text, embedding, length: int):
    """The family's own ``(cos, sin)`` at positions ``0..length-1``."""
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    extra = {}
    if "layer_type" in inspect.signature(embedding.forward).parameters:
        extra["layer_type"] = (getattr(text, "layer_types", None) or ["full_attention"])[0]
    x = torch.zeros(1, length, head_dim)
    return embedding(x, torch.arange(length)[None], **extra)


def read_layout(model_type: str, apply_name: str | None = None) -> str | None:
    """Which pairs of input channels the family's own functions rotate together, and in
    which direction: rotate every basis vector at positions 0 and 1 (R0, R1) and read row 0
    of ``R1ᵀ R0``, the rotation by θ seen from the scores (which a permutation of the
    output channels, as the latent-attention functions make, leaves alone): ``+sin θ`` on
    channel d/2 is half, on channel 1 interleaved; ``-sin θ`` the rotation reversed. None
    where the default config does not build them."""
    built = family(model_type, apply_name)
    if built is None:
        return None
    text, embedding, apply = built
    try:
        cos, sin = cos_sin(text, embedding, 2)
        width = cos.shape[-1]
        basis = torch.eye(width).view(1, width, 1, width).expand(1, width, 2, width)  # heads
        out = apply(basis.clone(), basis.clone(), cos, sin)[0][0]  # [width, 2, width]
    except (TypeError, ValueError, RuntimeError, AttributeError, KeyError):
        return None  # a signature or a config this generic reader does not build
    row = out[0, 1] @ out[:, 0].T  # <R1 e_0, R0 e_j> for every j
    mixed = [(j, float(row[j])) for j in range(1, width) if abs(row[j]) > 1e-6]
    assert len(mixed) == 1, f"{model_type}: e_0 mixes with {mixed}"
    (index, value), sine = mixed[0], float(sin[0, 1, 0])
    if value * sine < 0:
        return "reversed"
    return {width // 2: "half", 1: "interleaved"}.get(index, f"pairs (0, {index})")


TABLED = sorted(HALF | INTERLEAVED)


def test_every_tabled_layout_is_what_transformers_code_rotates():
    """Every entry the installed transformers can build by default is checked; the rest
    (other signatures, composite configs) are counted, never guessed."""
    checked, wrong = 0, []
    for model_type in TABLED:
        read = read_layout(model_type)
        if read is None:
            continue
        checked += 1
        if read != pair_layout(model_type):
            wrong.append((model_type, pair_layout(model_type), read))
    assert not wrong, f"the table says one layout, transformers' code rotates another: {wrong}"
    assert checked >= 150, f"only {checked} of {len(TABLED)} model types could be read"


def test_refused_types_rotate_as_their_reason_says():
    for model_type in REFUSED:
        assert read_layout(model_type) in (None, "reversed"), model_type
        with pytest.raises(ValueError, match=model_type):
            pair_layout(model_type)


@pytest.mark.parametrize("model_type", ["cohere", "cohere2", "glm", "glm4", "helium", "llama"])
def test_rope_from_config_rotates_as_the_family_does(model_type):
    """The families that rotated the wrong pairs before the table (and Llama): posenc's
    rotation of random q equals the family's own, on the rotary slice and past it."""
    text, embedding, apply = family(model_type)
    cos, sin = cos_sin(text, embedding, 6)
    rope = rope_from_hf_config(text)
    head_dim, width = rope.head_dim, cos.shape[-1]
    q = torch.randn(1, 2, 6, head_dim, generator=torch.Generator().manual_seed(0))
    ours, _ = rope(q, q.clone())
    theirs, _ = apply(q[..., :width], q[..., :width].clone(), cos, sin)
    # angles up to 5 rad in float32 (transformers) and float64 reduced mod 2π (posenc)
    torch.testing.assert_close(ours[..., :width], theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours[..., width:], q[..., width:], atol=0, rtol=0)


def test_multi_head_latent_attention_follows_rope_interleave():
    """Each latent-attention family applies ``apply_rotary_pos_emb_interleave`` when its
    config's ``rope_interleave`` is true (the default) and ``apply_rotary_pos_emb`` when not:
    the two read as interleaved and half."""
    read = 0
    for model_type in MLA_BY_FLAG:
        assert pair_layout(model_type) == "interleaved"  # transformers' default
        assert pair_layout(model_type, rope_interleave=False) == "half"
        on = read_layout(model_type, "apply_rotary_pos_emb_interleave")
        if on is not None:
            read += 1
            assert on == "interleaved", model_type
            assert read_layout(model_type, "apply_rotary_pos_emb") == "half", model_type
    assert read >= 3
    config = {"model_type": "deepseek_v3", "qk_rope_head_dim": 64, "rope_theta": 10000.0}
    assert rope_from_hf_config(config).config.layout == "interleaved"
    assert rope_from_hf_config({**config, "rope_interleave": False}).config.layout == "half"


def test_every_flagged_latent_attention_reads_its_flag():
    """A model type is in MLA_BY_FLAG only if its modeling code reads ``rope_interleave``;
    DeepSeek-V2's does not (complex pairs always): interleaved even with the flag false."""
    for model_type in MLA_BY_FLAG:
        package = transformers.CONFIG_MAPPING[model_type].__module__.split(".")[2]
        module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
        assert "rope_interleave" in inspect.getsource(module), model_type
    v2 = importlib.import_module("transformers.models.deepseek_v2.modeling_deepseek_v2")
    assert "rope_interleave" not in inspect.getsource(v2)
    assert pair_layout("deepseek_v2", rope_interleave=False) == "interleaved"


def test_an_unread_model_type_needs_layout_and_a_known_one_refuses_another():
    config = {"model_type": "my_model", "head_dim": 16, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match=r"model_type 'my_model'.*pass layout='half'"):
        rope_from_hf_config(config)
    with pytest.raises(ValueError, match="a config without model_type"):
        rope_from_hf_config({"head_dim": 16})
    assert rope_from_hf_config(config, layout="interleaved").config.layout == "interleaved"
    llama = {**config, "model_type": "llama"}
    with pytest.raises(ValueError, match="contradicts model_type 'llama'"):
        rope_from_hf_config(llama, layout="interleaved")
    with pytest.raises(ValueError, match="layout must be 'half' or 'interleaved'"):
        rope_from_hf_config(config, layout="neox")
    with pytest.raises(ValueError, match="nanochat"):
        rope_from_hf_config({**config, "model_type": "nanochat"}, layout="half")


def test_every_buildable_model_type_is_exact_or_refused():
    """rope_from_hf_config on each tabled model type's default config (transformers'
    own): the scores of q rotated by posenc equal those of q rotated by the family's
    functions (scores, since the latent-attention functions also permute their output
    channels), the channels past the rotary slice untouched; or a ValueError that names
    what posenc does not take (per-layer rope_parameters, say). Never a third outcome."""
    exact, refused, wrong = [], [], []
    for model_type in TABLED:
        built = family(model_type)
        if built is None:
            continue
        text, embedding, apply = built
        try:
            cos, sin = cos_sin(text, embedding, 6)
        except (TypeError, ValueError, RuntimeError, AttributeError, KeyError):
            continue  # the reader's limit, as in read_layout
        try:
            rope = rope_from_hf_config(text)
        except ValueError:
            refused.append(model_type)
            continue
        width = cos.shape[-1]
        q = torch.randn(1, 2, 6, rope.head_dim, generator=torch.Generator().manual_seed(0))
        ours, _ = rope(q, q.clone())
        if model_type in OWN_CHECKS:  # checked against their own functions elsewhere
            continue
        theirs, _ = apply(q[..., :width], q[..., :width].clone(), cos, sin)
        rotated = ours[..., :width]
        scores = rotated @ rotated.transpose(-1, -2)  # [1, 2, 6, 6]
        expected = theirs @ theirs.transpose(-1, -2)
        # float32 angles (transformers) against float64 reduced mod 2π (posenc), positions
        # < 6: ~1e-6 relative per product, summed over the slice: far inside 1e-4, while a
        # wrong layout or direction moves a score by O(1)
        same = torch.allclose(scores, expected, atol=1e-4, rtol=1e-4)
        if same and torch.equal(ours[..., width:], q[..., width:]):
            exact.append(model_type)
        else:
            wrong.append(model_type)
    assert not wrong, f"rotated other than transformers rotates: {wrong}"
    assert len(exact) >= 150, f"{len(exact)} exact, {len(refused)} refused"

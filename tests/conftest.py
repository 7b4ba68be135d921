import itertools
import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import settings

# inductor compiles in the test process: a pool of compile workers would start in each
# xdist worker, each importing torch (seconds of two busy cores), for the few kernels a
# test compiles. Set before torch's inductor reads its configuration.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# every measured choice at its default (posenc.calibration): no test times anything, and a
# result does not depend on a timing; tests/test_calibration.py turns it on where it tests it
os.environ["POSENC_CALIBRATE"] = "0"

import torch

# Triton kernels (posenc.functional.rope_triton) run under Triton's interpreter on CPU
# tensors where there is no GPU; Triton reads this when a kernel is defined, at its import
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from posenc.attn.runners.flex import flex_available

# Property tests: deterministic in CI, a few more examples locally.
settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

torch.set_num_threads(1)  # two xdist workers on two cores


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _tol(dtype=torch.float32, n=1, scale=1.0):
    """``assert_close`` tolerances, as ``{"atol": ..., "rtol": ...}``, for two results that
    differ by rounding only: the same math with its operations in another order (another
    kernel, vector width, BLAS blocking, batch shape, FMA or not) or against a float64
    reference.

    A float sum of ``n`` terms, added in any order, is off the exact sum by at most
    ``(n - 1)·eps/2·Σ|terms|`` to first order (every rounding the same way; ``sqrt(n)`` in
    place of ``n`` is typical), so two such results differ by less than ``n·eps·Σ|terms|``.
    A chain of operations counts one term per rounding. Hence ``rtol = n·eps`` (for a result
    about as large as the sum of its terms) and ``atol = n·eps·scale``, with ``scale`` at
    least ``Σ|terms|`` (for a result that cancels). It is a bound, not an estimate, so it
    holds on every CPU, while a wrong sign, slope, position or permutation changes a result
    by far more. How to count:

    - a dot product or sum of ``n`` terms: ``n``, ``scale`` >= ``Σ|terms|``;
    - ``cos``/``sin`` of an angle computed with ``k`` roundings: ``n = k + 1``, ``scale``
      the largest angle (the angle is off by ``k·eps·|angle|``: large positions lose digits);
    - ``exp(x)`` with ``x`` computed with ``k`` roundings is off by ``k·eps·|x|`` relatively:
      ``n = k·max|x|`` and ``scale=0`` (relative only);
    - attention outputs: :func:`_attention_tol` works it out row by row.
    """
    eps = torch.finfo(dtype).eps
    return {"atol": n * eps * float(scale), "rtol": n * eps}


def _softmax_terms(q, k, bias=None, scale=None, causal=False, allowed=None):
    """The float64 attention weights ``p`` and, per score, ``S = scale·Σ_l |q_l k_l| +
    |bias|`` (what its rounding errors are relative to): both ``[b, h, q_len, k_len]``,
    key heads repeated to the query heads. Arguments as :func:`_dense_attention`."""
    q64, k64 = q.detach().double(), k.detach().double()
    k_len = k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k64 = k64.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = scale * q64 @ k64.transpose(-1, -2)
    size = abs(scale) * (q64.abs() @ k64.abs().transpose(-1, -2))
    if bias is not None:
        bias = bias.detach().double()
        scores = scores + bias
        size = size + bias.abs().nan_to_num(posinf=0.0, neginf=0.0)
    if causal:
        allowed = torch.ones(k_len, k_len, dtype=torch.bool).tril()[k_len - q.shape[2] :]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
        size = size.masked_fill(~allowed, 0.0)
    return scores.softmax(-1).nan_to_num(0.0), size  # a row that sees no key: zeros


def _score_size(q, k, bias=None, scale=None, causal=False, allowed=None):
    """The largest ``Σ_j p_j S_j`` over the rows (see :func:`_softmax_terms`): the size of the
    scores' rounding errors that the attention weights feel (a key the softmax ignores does
    not count, however large its bias)."""
    p, size = _softmax_terms(q, k, bias, scale, causal, allowed)
    return (p * size).sum(-1).max().item()


def _attention_tol(
    q,
    k,
    v,
    bias=None,
    scale=None,
    causal=False,
    allowed=None,
    extra_n=0,
    score_err=0.0,
    value_size=0.0,
    out_proj=None,
):
    """:func:`_tol`'s bound worked out for ``softmax(q kᵀ·scale + bias) v`` computed two ways
    (other kernels, or a float64 reference), row by row. Arguments as
    :func:`_dense_attention`.

    A score is a dot product over ``d`` plus the bias (a few roundings): score ``j`` is off
    by at most ``δ_j = (d + 4 + extra_n)·eps·S_j + score_err`` (``S_j``: see
    :func:`_softmax_terms`). To first order that moves the output row by
    ``Σ_j p_j (δ_j - Σ p δ) (v_j - out)``, at most ``Σ_j p_j (δ_j + Σ p δ) |v_j - out|``:
    keys with no weight do not count, and sharp rows (one key takes all) barely move. The
    normaliser and the output (sums over ``k_len``, convex combinations of ``v``) add
    ``(2·k_len + 2)·eps·max|v|``. The largest of these over the rows is ``atol``.

    ``extra_n``: further roundings of each score term on one side (in units of ``eps·S``),
    e.g. rotations or tables computed elsewhere. ``score_err``: an absolute bound by which
    the scores of one side are off besides (a bias computed in float32, say).
    ``value_size``: the size of a further term of each value (Shaw's ``a^V``).
    ``out_proj``: a weight ``[out, in]`` the output goes through afterwards: ``atol`` times
    its largest row sum of ``|w|``, plus that sum's own ``in`` roundings. bf16/fp16 outputs
    add their own rounding.
    """
    p, size = _softmax_terms(q, k, bias, scale, causal, allowed)
    d, k_len = q.shape[-1], k.shape[-2]
    v64 = v.detach().double().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    out = p @ v64
    eps = torch.finfo(torch.float32 if q.dtype != torch.float64 else q.dtype).eps
    delta = (d + 4 + extra_n) * eps * size + score_err  # [b, h, q_len, k_len]
    weight = p * (delta + (p * delta).sum(-1, keepdim=True))
    v64, out = v64.expand(*p.shape[:2], -1, -1), out.expand(*p.shape[:2], -1, -1)
    moved = 0.0
    for b, h in itertools.product(range(p.shape[0]), range(p.shape[1])):
        for rows in torch.arange(p.shape[2]).split(64):  # |v_j - out|: [rows, k_len, d]
            spread = (v64[b, h].unsqueeze(0) - out[b, h, rows].unsqueeze(1)).abs()
            spread = spread + 2 * value_size
            moved = max(moved, (weight[b, h, rows].unsqueeze(-1) * spread).sum(1).max().item())
    v_max = v64.abs().max().item() + value_size
    atol = moved + (2 * k_len + 2) * eps * v_max
    if q.dtype in (torch.bfloat16, torch.float16):
        atol += torch.finfo(q.dtype).eps * out.abs().max().item()
    if out_proj is not None:
        rows = out_proj.detach().double().abs().sum(-1).max().item()
        atol = rows * (atol + out_proj.shape[-1] * eps * v_max)
    return {"atol": atol, "rtol": 0.0}


def _sharpen(model, std=0.5):
    """Large q/k/v weights make attention sharp, so that positions show in the logits (near
    uniform attention at initialisation would hide a wrong rotation or bias)."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.normal_(std=std)
    return model


def _grad_tol(q, k, expected, size):
    """:func:`_tol` for gradients of attention computed two ways: the weights move by
    ``2·(d + 4)·eps·S`` relatively (the scores' rounding; ``size`` is ``S``, see
    :func:`_score_size`), and a parameter's gradient is a sum over every score
    (batch·heads·q_len·k_len terms). The largest of the ``expected`` gradients stands for
    the size of the terms: an estimate, not a bound (a gradient can be a sum of terms that
    cancel: FIRE's output bias gets 0)."""
    n = 2 * (q.shape[-1] + 4) * max(size, 1.0) + q.numel() // q.shape[-1] * k.shape[2]
    return _tol(n=n, scale=max(e.abs().max().item() for e in expected))


def _model_tol(model, seq_len, logits):
    """:func:`_tol` for the logits of a :class:`~posenc.models.TransformerLM` computed two
    ways (cached steps or one forward, other batch shapes). A layer chains sums: its norms
    and the q/k/v, output and MLP projections (``4·dim + hidden`` terms), the scores
    (``head_dim``), the softmax and the weighted values (``seq_len`` each); the final norm
    and the head sum ``2·dim`` more. ``n`` counts them all and ``scale`` is the largest
    logit: an estimate, since the layers could amplify errors (at these sizes, little).
    """
    hidden = model.blocks[0].mlp[0].out_features
    per_layer = 4 * model.dim + hidden + model.head_dim + 2 * seq_len
    n = model.n_layers * per_layer + 2 * model.dim
    return _tol(logits.dtype, n=n, scale=logits.abs().max().item())


def _check_cached_decoding(model, prompt, new_tokens):
    """Greedy generation with the KV cache equals recomputation token for token, and a
    prefill of ``prompt`` then one-token steps give the logits of one full forward (up to
    :func:`_model_tol`).

    Returns ``(tokens, full_logits)`` for further checks.
    """
    cached = model.generate(prompt, new_tokens, use_cache=True)
    # integer tokens: equal unless two logits lie within rounding of each other
    assert torch.equal(cached, model.generate(prompt, new_tokens, use_cache=False))
    batch, start = prompt.shape
    total = start + new_tokens
    with torch.no_grad():
        full = model(cached)
        cache = model.new_cache(batch, total)
        steps = [model(cached[:, :start], cache=cache)]
        steps += [model(cached[:, i : i + 1], cache=cache) for i in range(start, total)]
    rounding = _model_tol(model, total, full)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **rounding)
    return cached, full


@pytest.fixture
def sharpen():
    return _sharpen


@pytest.fixture
def check_cached_decoding():
    return _check_cached_decoding


def _dense_attention(q, k, v, bias=None, allowed=None, causal=False, scale=None):
    """softmax(q kᵀ · scale + bias) v (``scale`` 1/sqrt(d) by default), computed densely in
    float64 with the key/value heads repeated; ``allowed`` masks scores, ``causal`` puts the
    queries at the end of the keys."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias.double()
    if causal:
        q_len, k_len = q.shape[2], k.shape[2]
        allowed = torch.ones(k_len, k_len, dtype=torch.bool).tril()[k_len - q_len :]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.fixture
def dense_attention():
    return _dense_attention


# session-scoped: usable from hypothesis tests, whose function-scoped fixtures are not reset
# between examples
@pytest.fixture(scope="session")
def tol():
    return _tol


@pytest.fixture(scope="session")
def attention_tol():
    return _attention_tol


@pytest.fixture(scope="session")
def score_size():
    return _score_size


@pytest.fixture(scope="session")
def model_tol():
    return _model_tol


@pytest.fixture(scope="session")
def grad_tol():
    return _grad_tol


@pytest.fixture(scope="session")
def bfloat16_attention_runs() -> bool:
    """Whether torch's bfloat16 CPU flash kernel runs here: torch 2.13 raises in
    ``pack_vnni2`` under ATen kernels without AVX-512 (``ATEN_CPU_CAPABILITY=default``, and
    ``avx2`` forced on an AVX-512 machine), in plain SDPA too, so posenc cannot either."""
    q = torch.randn(1, 1, 64, 16, dtype=torch.bfloat16, requires_grad=True)
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    try:
        kernel(q, q, q, 0.0, True, attn_mask=torch.zeros(1, 1, 64, 64))[0].sum().backward()
    except RuntimeError as err:
        if "pack_vnni2" in str(err):
            return False
        raise
    return True


@pytest.fixture(scope="session")
def backends():
    """The attention backends of bias encodings that run here: flex only where compiled flex
    attention does (:func:`posenc.attn.runners.flex.flex_available`: not on a CPU without AVX2 or
    AVX-512, e.g. under ``ATEN_CPU_CAPABILITY=default``)."""
    flex = ("flex",) if flex_available(torch.device("cpu")) else ()
    return ("math", "sdpa", *flex)


#: config.json files as the Hub serves them, older formats included (rope_scaling with "type",
#: GPT-NeoX's rotary_pct / rotary_emb_base, T5 without relative_attention_max_distance): the
#: position-related keys copied from the real files, the rest trimmed
HUB_CONFIGS = Path(__file__).parent / "data" / "hub"


def _hub_config(name: str, **changes):
    """The raw config.json of ``name`` (a file in ``tests/data/hub``) as a dict, with
    ``changes`` applied (a value of None drops the key)."""
    config = {**json.loads((HUB_CONFIGS / f"{name}.json").read_text()), **changes}
    return {k: v for k, v in config.items() if v is not None}


@pytest.fixture(scope="session")
def hub_config():
    return _hub_config


def _saved_score_tensors(forward, batch, heads, seq):
    """The shapes of the tensors autograd saves while ``forward()`` runs that are as large
    as ``[batch, heads, seq, seq]`` and lead with the batch (or batch·heads): what a
    training path must not keep per layer. Returns ``(shapes, result)``."""
    big = []

    def pack(t):
        if t.dim() and t.shape[0] in (batch, batch * heads) and t.numel() >= batch * heads * seq**2:
            big.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = forward()
    return big, result


@pytest.fixture(scope="session")
def saved_score_tensors():
    return _saved_score_tensors


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> the directory the config.json of a real checkpoint
    (``tests/hf/inspect/checkpoints.py``) was saved to (skipped without transformers)."""
    pytest.importorskip("transformers")
    from tests.hf.inspect.checkpoints import real_configs

    out = {}
    for name, config in real_configs().items():
        folder = tmp_path_factory.mktemp(name)
        config.save_pretrained(folder)
        out[name] = folder
    return out


@pytest.fixture
def legacy(tmp_path, hub_config):
    """A directory holding a Hub config.json (``tests/data/hub``) with changes (None: drop);
    by default ``tmp_path / name``."""

    def write(name, folder=None, **changes):
        folder = tmp_path / name if folder is None else folder
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(hub_config(name, **changes)))
        return folder

    return write

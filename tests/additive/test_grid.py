"""The image-grid encodings ``sincos_2d`` (MAE) and ``learned_2d`` (ViT): against naive
float64 loops, against Hugging Face's ViT-MAE and ViT, and by their properties.

Hugging Face models are tiny and randomly initialised (no downloads). A fresh
``ViTMAEModel(config)`` of transformers 5.24 leaves its position buffer at zero (the
embeddings' ``initialize_weights`` returns early because their patch projection, a child, is
initialised first), so the MAE tests build ``ViTMAEEmbeddings`` alone and call that
``initialize_weights``: the code that builds the buffer MAE checkpoints hold.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import posenc
from posenc.additive.grid import GridOutOfRangeError
from posenc.functional.grid import GRID_ORDERS, grid_table_index, resample_grid_table, sincos_2d
from posenc.functional.sinusoidal import sinusoidal
from posenc.positions import grid

GRIDS = [(1, 1), (2, 3), (3, 2), (4, 4), (3, 7)]


def naive_sincos_2d(coords, dim, base=10000.0, order="col_row"):
    """MAE's formula, one token, axis and frequency at a time, in float64."""
    quarter = dim // 4
    out = torch.zeros(len(coords), dim, dtype=torch.float64)
    for t, (row, col) in enumerate(coords.tolist()):
        first, second = (col, row) if order == "col_row" else (row, col)
        for half, a in enumerate((first, second)):
            start = half * dim // 2
            for i in range(quarter):
                omega = 1.0 / base ** (i / quarter)
                out[t, start + i] = math.sin(a * omega)
                out[t, start + quarter + i] = math.cos(a * omega)
    return out


def naive_lookup(weight, positions, size, prefix):
    """Token i < prefix reads row i; patch (r, c) reads row prefix + r * w + c."""
    rows = []
    for i, (r, c) in enumerate(positions.tolist()):
        rows.append(weight[i] if i < prefix else weight[prefix + r * size[1] + c])
    return torch.stack(rows)


def table_tol(tol):
    """A float32 sin/cos table of float64 angles, reduced modulo 2π and rounded to float32
    (eps/2 of up to 2π) before sin/cos (an ulp): against an exact one, or the same angles in
    other places of a vectorised loop (a lane or the scalar tail)."""
    return tol(n=2, scale=2 * math.pi)


def row_table(h, w, dim, prefix=0):
    """A learned table whose patch rows depend on the row only (and random prefix rows)."""
    per_row = torch.randn(h, 1, dim).expand(h, w, dim).reshape(h * w, dim)
    return torch.cat((torch.randn(prefix, dim), per_row))


# sincos_2d ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", GRIDS)
@pytest.mark.parametrize("order", GRID_ORDERS)
@pytest.mark.parametrize("prefix", [0, 2])
def test_sincos_2d_matches_a_naive_loop(size, order, prefix):
    h, w = size
    enc = posenc.create("sincos_2d", dim=12, grid=size, order=order, prefix=prefix)
    positions = grid(h, w, prefix)
    patches = naive_sincos_2d(positions[prefix:], 12, order=order)
    expected = torch.cat((torch.zeros(prefix, 12, dtype=torch.float64), patches))
    assert_close(enc.encode(positions.double()), expected, rtol=0, atol=1e-12)
    assert_close(enc.encode(positions), expected.float())
    x = torch.randn(2, prefix + h * w, 12)
    assert_close(enc(x), x + expected.float())  # the default positions: the configured grid


def test_sincos_2d_normalised_float_coordinates_and_base():
    enc = posenc.create("sincos_2d", dim=8, base=100.0, order="row_col")
    positions = grid(3, 5, normalize=True)  # float32 patch centres in (-1, 1)
    expected = naive_sincos_2d(positions, 8, base=100.0, order="row_col")
    assert (positions < 0).any()
    assert_close(enc.encode(positions), expected.float())
    assert_close(enc.encode(positions.double()), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("size", GRIDS)
@pytest.mark.parametrize("cls_token", [False, True])
def test_sincos_2d_matches_hf_builder_in_both_orders(size, cls_token):
    vit_mae = pytest.importorskip("transformers.models.vit_mae.modeling_vit_mae")
    build = vit_mae.build_2d_sinusoidal_position_embedding
    h, w = size
    prefix = int(cls_token)
    positions = grid(h, w, prefix).double()

    def ours(order):
        return posenc.create("sincos_2d", dim=16, order=order, prefix=prefix).encode(positions)

    theirs = build(h, w, embed_dim=16, cls_token=cls_token, dtype=torch.float64)  # [row | col]
    assert_close(ours("row_col"), theirs, rtol=0, atol=1e-12)
    # col_row is the builder on the transposed grid (w rows, h columns), read back transposed
    transposed = build(w, h, embed_dim=16, cls_token=cls_token, dtype=torch.float64)
    patches = transposed[prefix:].reshape(w, h, 16).transpose(0, 1).reshape(h * w, 16)
    assert_close(ours("col_row"), torch.cat((transposed[:prefix], patches)), rtol=0, atol=1e-12)
    # ... which is the builder's output with its halves swapped
    assert_close(ours("col_row"), torch.cat((theirs[:, 8:], theirs[:, :8]), -1), rtol=0, atol=1e-12)
    # float32: angles in float64 on both sides, rounded once
    enc = posenc.create("sincos_2d", dim=16, order="row_col", prefix=prefix)
    assert_close(enc.encode(grid(h, w, prefix)), build(h, w, 16, cls_token=cls_token))


def _vit_mae_embeddings(mask_ratio):
    transformers = pytest.importorskip("transformers")
    from transformers.models.vit_mae.modeling_vit_mae import ViTMAEEmbeddings

    config = transformers.ViTMAEConfig(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=8,
        patch_size=2,  # a 4 x 4 grid
        mask_ratio=mask_ratio,
    )
    emb = ViTMAEEmbeddings(config).eval()
    emb.initialize_weights()
    return emb


def test_default_order_reproduces_hf_vit_mae_position_embedding(tol):
    emb = _vit_mae_embeddings(mask_ratio=0.0)
    enc = posenc.create("sincos_2d", dim=16, grid=(4, 4), prefix=1)
    table = enc.encode(enc.default_positions(17))
    # MAE's float64 numpy table rounded to float32, against ours
    assert_close(table, emb.position_embeddings[0].detach(), **table_tol(tol))
    # the order matters: the canonical row_col layout is not what MAE's checkpoints hold
    other = posenc.create("sincos_2d", dim=16, grid=(4, 4), prefix=1, order="row_col")
    assert (other.encode(other.default_positions(17)) - table).abs().max() > 0.5
    # the embeddings' forward: class token first, patches row-major (ascending noise and no
    # masking keep the patch order)
    pixels = torch.randn(2, 3, 8, 8)
    noise = torch.arange(16.0).expand(2, 16)
    with torch.no_grad():
        theirs, _, _ = emb(pixels, noise=noise)
        x = torch.cat((emb.cls_token.expand(2, -1, -1), emb.patch_embeddings(pixels)), dim=1)
        assert_close(enc(x), theirs)


def test_mae_masking_is_explicit_positions_of_the_kept_patches():
    emb = _vit_mae_embeddings(mask_ratio=0.75)
    enc = posenc.create("sincos_2d", dim=16, prefix=1)  # no grid: positions are explicit
    pixels, noise = torch.randn(2, 3, 8, 8), torch.rand(2, 16)
    keep = torch.argsort(noise, dim=1)[:, :4]  # [b, 4]: MAE keeps the lowest-noise patches
    with torch.no_grad():
        theirs, _, _ = emb(pixels, noise=noise)
        patches = emb.patch_embeddings(pixels)  # [b, 16, dim]
        kept = torch.gather(patches, 1, keep.unsqueeze(-1).expand(-1, -1, 16))
        x = torch.cat((emb.cls_token.expand(2, -1, -1), kept), dim=1)  # [b, 5, dim]
    positions = torch.cat((torch.zeros(2, 1, 2, dtype=torch.long), grid(4, 4)[keep]), dim=1)
    assert_close(enc(x, positions), theirs)


@given(
    h=st.integers(1, 6),
    w=st.integers(1, 6),
    quarter=st.integers(1, 4),
    order=st.sampled_from(GRID_ORDERS),
)
def test_sincos_2d_halves_follow_the_row_and_the_column(h, w, quarter, order, tol):
    dim = 4 * quarter
    pe = sincos_2d(grid(h, w), dim, order=order).reshape(h, w, dim)
    first, second = pe[..., : dim // 2], pe[..., dim // 2 :]
    row_half, col_half = (first, second) if order == "row_col" else (second, first)
    # tokens of one row share the row half, tokens of one column the column half: the same
    # angles, whose sin/cos may round otherwise in another place of the vectorised loop
    assert_close(row_half, row_half[:, :1].expand_as(row_half), **table_tol(tol))
    assert_close(col_half, col_half[:1].expand_as(col_half), **table_tol(tol))
    # each half is the 1-D sinusoidal encoding ([sin | cos]) of its coordinate, and the grid
    # keeps its orientation: h rows along the first axis, w columns along the second
    assert_close(row_half[:, 0], sinusoidal(torch.arange(h), dim // 2, layout="concat"))
    assert_close(col_half[0], sinusoidal(torch.arange(w), dim // 2, layout="concat"))
    pairs = pe.reshape(h, w, 2, 2, quarter)  # [h, w, half, sin/cos, i]
    assert_close(pairs.square().sum(3), torch.ones(h, w, 2, quarter))


def test_rectangular_grids_keep_their_orientation():
    wide = posenc.create("sincos_2d", dim=8, grid=(2, 5))
    tall = posenc.create("sincos_2d", dim=8, grid=(5, 2))
    pe_wide = wide.encode(wide.default_positions(10))
    pe_tall = tall.encode(tall.default_positions(10))
    # col_row: the first half takes 5 values along a wide grid's row, 2 along a tall one's
    assert len(torch.unique(pe_wide[:5, :4], dim=0)) == 5
    assert len(torch.unique(pe_tall[:, :4], dim=0)) == 2
    assert not torch.allclose(pe_wide, pe_tall)
    assert_close(pe_tall.reshape(5, 2, 8).transpose(0, 1).reshape(10, 8)[:, :4], pe_wide[:, 4:])


def test_sincos_2d_prefix_rows_are_zeros_and_not_read(tol):
    enc = posenc.create("sincos_2d", dim=8, grid=(2, 3), prefix=2)
    positions = grid(2, 3, prefix=2)
    out = enc.encode(positions)
    assert torch.equal(out[:2], torch.zeros(2, 8))
    moved = positions.clone()
    moved[:2] = torch.tensor([[5, -3], [7, 1]])
    assert torch.equal(enc.encode(moved), out)  # the same shape and patch angles: exactly
    batched = torch.stack((positions, moved))  # [2, seq, 2]
    assert_close(enc.encode(batched), torch.stack((out, out)), **table_tol(tol))


def test_sincos_2d_dtypes():
    enc = posenc.create("sincos_2d", dim=16, grid=(3, 4), prefix=1)
    pe = enc.encode(enc.default_positions(13))
    x = torch.randn(2, 13, 16).bfloat16()
    # the same float32 table and sum (same shapes), rounded once: bit for bit
    assert torch.equal(enc(x), (x.float() + pe).bfloat16())
    x64 = torch.randn(2, 13, 16, dtype=torch.float64)
    pe64 = enc.encode(enc.default_positions(13), dtype=torch.float64)
    assert enc(x64).dtype == torch.float64
    assert_close(enc(x64), x64 + pe64, rtol=0, atol=1e-15)
    assert (pe64 - pe.double()).abs().max() > 0  # float64 really is computed in float64


def test_sincos_2d_config_and_inputs_are_validated():
    with pytest.raises(ValueError, match="dim must be divisible by 4"):
        posenc.create("sincos_2d", dim=6)
    with pytest.raises(TypeError, match="dim must be an int"):
        posenc.create("sincos_2d", dim=8.0)
    with pytest.raises(ValueError, match=r"order must be one of \['row_col', 'col_row'\]"):
        posenc.create("sincos_2d", dim=8, order="xy")
    with pytest.raises(ValueError, match=r"grid must be a pair \(h, w\)"):
        posenc.create("sincos_2d", dim=8, grid=(2,))
    with pytest.raises(TypeError, match=r"grid must be a pair \(h, w\)"):
        posenc.create("sincos_2d", dim=8, grid=2)
    with pytest.raises(ValueError, match="grid h must be >= 1, got 0"):
        posenc.create("sincos_2d", dim=8, grid=(0, 3))
    with pytest.raises(ValueError, match="prefix must be >= 0"):
        posenc.create("sincos_2d", dim=8, prefix=-1)
    assert posenc.create("sincos_2d", dim=8, grid=[2, 3]).config.grid == (2, 3)
    with pytest.raises(ValueError, match="base must be > 0"):
        posenc.create("sincos_2d", dim=8, base=0.0)
    with pytest.raises(ValueError, match="multiple of 4"):
        sincos_2d(grid(2, 2), 6)
    enc = posenc.create("sincos_2d", dim=8, prefix=2)
    with pytest.raises(ValueError, match=r"must be \[seq, 2\] or \[batch, seq, 2\]"):
        enc.encode(torch.arange(4))
    with pytest.raises(ValueError, match=r"has 1 rows but this encoding has prefix=2"):
        enc.encode(torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="must be finite"):
        enc.encode(torch.tensor([[0.0, 0.0], [0.0, 0.0], [float("nan"), 1.0]]))
    with pytest.raises(ValueError, match=r"no grid configured.*positions=posenc\.positions\.grid"):
        enc(torch.randn(1, 6, 8))
    sized = posenc.create("sincos_2d", dim=8, grid=(2, 3))
    with pytest.raises(ValueError, match=r"cover 6 tokens, but the sequence has 5: pass pos"):
        sized(torch.randn(1, 5, 8))
    assert_close(sized.default_positions(2, offset=4), grid(2, 3)[4:])
    with pytest.raises(ValueError, match="after 1 earlier tokens"):
        sized.default_positions(4, offset=1)
    with_prefix = posenc.create("sincos_2d", dim=8, grid=(2, 3), prefix=1)
    with pytest.raises(ValueError, match=r"first prefix=1 rows .* start at token 0, not 3"):
        with_prefix.default_positions(4, offset=3)  # its first row would be read as prefix


# learned_2d --------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [0, 2])
def test_learned_2d_is_a_row_lookup(prefix):
    size = (3, 4)
    enc = posenc.create("learned_2d", dim=5, grid=size, prefix=prefix)
    weight = enc.weight.detach()
    assert weight.shape == (prefix + 12, 5)
    full = grid(3, 4, prefix)
    assert torch.equal(enc.encode(full), weight)  # the table is in the grid's token order
    assert torch.equal(enc.encode(full), naive_lookup(weight, full, size, prefix))
    subset = torch.cat((full[:prefix], torch.tensor([[2, 3], [0, 1], [2, 3], [1, 0]])))
    assert torch.equal(enc.encode(subset), naive_lookup(weight, subset, size, prefix))
    batched = torch.stack((subset, subset.flip(0)))  # [2, seq, 2]; prefix rows not read
    expected = torch.stack((enc.encode(subset), naive_lookup(weight, subset.flip(0), size, prefix)))
    assert torch.equal(enc.encode(batched), expected)
    x = torch.randn(2, prefix + 12, 5)
    assert_close(enc(x), x + weight, rtol=0, atol=0)  # x plus the rows looked up
    assert torch.equal(
        grid_table_index(full[prefix:], 4, prefix), torch.arange(prefix, prefix + 12)
    )


def test_learned_2d_matches_hf_vit_embeddings_on_a_rectangular_grid():
    transformers = pytest.importorskip("transformers")
    from transformers.models.vit.modeling_vit import ViTEmbeddings

    config = transformers.ViTConfig(hidden_size=8, image_size=(8, 12), patch_size=2)
    emb = ViTEmbeddings(config).eval()  # a 4 x 6 grid of patches, then the class token
    enc = posenc.create("learned_2d", dim=8, grid=(4, 6), prefix=1)
    pixels = torch.randn(2, 3, 8, 12)
    with torch.no_grad():
        emb.position_embeddings.copy_(enc.weight.unsqueeze(0))
        theirs = emb(pixels)
        x = torch.cat((emb.cls_token.expand(2, -1, -1), emb.patch_embeddings(pixels)), dim=1)
        assert_close(enc(x), theirs, rtol=0, atol=0)  # ViT adds the same table: the same sums


@pytest.mark.parametrize(("new_grid", "antialias"), [((6, 8), None), ((3, 2), False)])
def test_resample_matches_hf_vit_interpolate_pos_encoding(new_grid, antialias):
    """Hugging Face ViT (as DINO) interpolates bicubic without antialiasing: the same as
    ours when growing, and as ours with ``antialias=False`` when shrinking."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.vit.modeling_vit import ViTEmbeddings

    config = transformers.ViTConfig(hidden_size=8, image_size=8, patch_size=2)
    emb = ViTEmbeddings(config).eval()  # square 4 x 4: HF reshapes by sqrt(num_positions)
    enc = posenc.create("learned_2d", dim=8, grid=(4, 4), prefix=1)
    h, w = new_grid
    pixels = torch.randn(2, 3, 2 * h, 2 * w)
    with torch.no_grad():
        emb.position_embeddings.copy_(enc.weight.unsqueeze(0))
        theirs = emb(pixels, interpolate_pos_encoding=True)
        x = torch.cat((emb.cls_token.expand(2, -1, -1), emb.patch_embeddings(pixels)), dim=1)
        assert_close(enc.resample(new_grid, antialias=antialias)(x), theirs)
        if antialias is False:  # the default antialiases when shrinking: not HF's result
            default = posenc.create("learned_2d", dim=8, grid=(4, 4), prefix=1)
            default.weight.copy_(emb.position_embeddings[0])
            assert (default.resample(new_grid)(x) - theirs).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("new_grid", "mode"), [((4, 2), "bilinear"), ((6, 10), "bicubic"), ((5, 3), "bicubic")]
)
def test_resample_matches_a_naive_interpolation(new_grid, mode):
    enc = posenc.create("learned_2d", dim=4, grid=(3, 5), prefix=2)
    old = enc.weight.detach().clone()
    image = old[2:].reshape(3, 5, 4).permute(2, 0, 1).unsqueeze(0)  # [1, dim, h, w]
    shrinks = new_grid[0] < 3 or new_grid[1] < 5
    resized = F.interpolate(image, new_grid, mode=mode, align_corners=False, antialias=shrinks)
    patches = resized[0].permute(1, 2, 0).reshape(-1, 4)
    assert enc.resample(new_grid, mode=mode) is enc
    assert enc.config.grid == new_grid
    # the same interpolate call on the same image, then copies
    assert torch.equal(enc.weight.detach(), torch.cat((old[:2], patches)))
    assert torch.equal(enc.weight.detach()[:2], old[:2])  # prefix rows untouched
    x = torch.randn(1, 2 + new_grid[0] * new_grid[1], 4)
    assert_close(enc(x), x + enc.weight.detach(), rtol=0, atol=0)  # the new default grid


def test_resample_to_the_same_grid_is_the_identity():
    enc = posenc.create("learned_2d", dim=4, grid=(3, 5), prefix=1)
    weight, config = enc.weight, enc.config
    assert enc.resample((3, 5)) is enc
    assert enc.weight is weight and enc.config is config


def test_resample_to_the_transposed_grid_is_a_real_resample():
    """(4, 6) -> (6, 4) keeps the token count, but a row-only table must stay row-only:
    a reshape would mix rows and columns."""
    enc = posenc.create("learned_2d", dim=3, grid=(4, 6))
    with torch.no_grad():
        enc.weight.copy_(row_table(4, 6, 3))
    old = enc.weight.detach().clone()
    enc.resample((6, 4))
    new = enc.weight.detach().reshape(6, 4, 3)
    assert_close(new, new[:, :1].expand_as(new))
    assert (new[0] - new[-1]).abs().max() > 1e-3  # and still varies from row to row
    assert not torch.equal(enc.weight.detach(), old)


@given(
    size=st.tuples(st.integers(1, 6), st.integers(1, 6)).filter(lambda s: s[0] != s[1]),
    new_grid=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    mode=st.sampled_from(["bicubic", "bilinear"]),
    prefix=st.integers(0, 2),
)
def test_resample_keeps_a_rectangular_grid_in_its_orientation(size, new_grid, mode, prefix, tol):
    h, w = size
    nh, nw = new_grid
    # Each output is a weighted sum of up to (4·ceil(h / nh) + 1)·(4·ceil(w / nw) + 1) table
    # values (bicubic taps, widened by antialiasing), |weights| summing below 2: a constant
    # row comes back constant up to that many roundings
    taps = (4 * -(-h // nh) + 1) * (4 * -(-w // nw) + 1)
    enc = posenc.create("learned_2d", dim=3, grid=size, prefix=prefix)
    with torch.no_grad():
        enc.weight.copy_(row_table(h, w, 3, prefix))
    old_prefix = enc.weight.detach()[:prefix].clone()
    rows = copy.deepcopy(enc).resample(new_grid, mode=mode).weight.detach()
    by_row = rows[prefix:].reshape(nh, nw, 3)
    rounding = tol(n=taps, scale=2 * enc.weight.detach().abs().max().item())
    assert_close(by_row, by_row[:, :1].expand_as(by_row), **rounding)
    assert torch.equal(rows[:prefix], old_prefix)
    # and the same for a table that depends on the column only
    with torch.no_grad():
        per_col = row_table(w, h, 3).reshape(w, h, 3).transpose(0, 1).reshape(h * w, 3)
        enc.weight[prefix:] = per_col
    rounding = tol(n=taps, scale=2 * enc.weight.detach().abs().max().item())
    cols = enc.resample(new_grid, mode=mode).weight.detach()[prefix:].reshape(nh, nw, 3)
    assert_close(cols, cols[:1].expand_as(cols), **rounding)


def transpose_table(table, h, w, prefix):
    """The table of the transposed image: patch (c, r) of a w x h grid is patch (r, c)."""
    patches = table[prefix:].reshape(h, w, -1).transpose(0, 1).reshape(h * w, -1)
    return torch.cat((table[:prefix], patches))


@given(
    size=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    new_grid=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    mode=st.sampled_from(["bicubic", "bilinear"]),
    antialias=st.sampled_from([None, True, False]),
)
def test_resample_commutes_with_transposing_the_image(size, new_grid, mode, antialias):
    (h, w), (nh, nw) = size, new_grid
    table = torch.randn(1 + h * w, 3, dtype=torch.float64)
    resampled = resample_grid_table(table, size, new_grid, 1, mode, antialias)
    transposed = transpose_table(table, h, w, 1)
    expected = resample_grid_table(transposed, (w, h), (nh, nw)[::-1], 1, mode, antialias)
    assert_close(transpose_table(resampled, nh, nw, 1), expected, rtol=0, atol=1e-12)


def test_antialiased_resample_to_one_column_still_resizes_the_rows():
    """PyTorch's antialiased interpolate to a width of 1 keeps the input rows' values
    (``[0, 1] -> [0, 0, 0]``); the resample works around it."""
    column = torch.tensor([[0.0], [1.0]])  # a 2 x 1 grid
    out = resample_grid_table(column, (2, 1), (3, 1), mode="bilinear", antialias=True)
    assert_close(out, torch.tensor([[0.0], [0.5], [1.0]]))  # PIL's triangle filter
    shrunk = resample_grid_table(torch.randn(4, 2), (2, 2), (3, 1))  # antialiased: w shrinks
    assert (shrunk[0] - shrunk[2]).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("new_grid", "default_is"), [((6, 6), False), ((2, 2), True), ((2, 6), True), ((4, 3), True)]
)
def test_antialias_only_when_shrinking(new_grid, default_is):
    enc = posenc.create("learned_2d", dim=4, grid=(4, 4), prefix=1)

    def resampled(antialias):
        return copy.deepcopy(enc).resample(new_grid, antialias=antialias).weight.detach()

    default, on, off = resampled(None), resampled(True), resampled(False)
    assert torch.equal(default, on if default_is else off)  # the same call
    assert (on - off).abs().max() > 1e-3  # the check can tell the two apart


def test_resample_keeps_dtype_device_and_requires_grad():
    enc = posenc.create("learned_2d", dim=4, grid=(2, 3), prefix=1, dtype=torch.bfloat16)
    old = enc.weight.detach().clone()
    enc.resample((4, 5))
    assert enc.weight.dtype == torch.bfloat16 and enc.weight.requires_grad
    expected = resample_grid_table(old.float(), (2, 3), (4, 5), prefix=1).bfloat16()
    # the same float32 math, rounded once: bit for bit
    assert torch.equal(enc.weight.detach(), expected)
    frozen = posenc.create("learned_2d", dim=4, grid=(2, 3))
    frozen.weight.requires_grad_(False)
    assert not frozen.resample((3, 3)).weight.requires_grad


def test_bad_resample_arguments_raise():
    enc = posenc.create("learned_2d", dim=4, grid=(2, 3))
    with pytest.raises(ValueError, match=r"mode must be one of \['bicubic', 'bilinear'\]"):
        enc.resample((2, 3), mode="nearest")  # checked even for the current grid
    with pytest.raises(ValueError, match="new_grid w must be >= 1, got 0"):
        enc.resample((2, 0))
    with pytest.raises(TypeError, match=r"new_grid must be a pair \(h, w\)"):
        enc.resample(5)
    with pytest.raises(TypeError, match="new_grid h must be an int"):
        enc.resample((2.0, 3))
    with pytest.raises(TypeError, match="antialias must be None, True or False"):
        enc.resample((4, 4), antialias="yes")
    with pytest.raises(ValueError, match=r"table must be \[prefix \+ h \* w, dim\] = \[7, dim\]"):
        resample_grid_table(torch.randn(6, 4), (2, 3), (3, 3), prefix=1)
    assert enc.config.grid == (2, 3) and enc.weight.shape == (6, 4)


def test_a_grid_larger_than_the_table_raises_until_resampled():
    enc = posenc.create("learned_2d", dim=4, grid=(2, 3), prefix=1)
    with pytest.raises(GridOutOfRangeError, match=r"7 rows \(grid=\(2, 3\), prefix=1\)"):
        enc(torch.randn(1, 10, 4))  # a 3 x 3 image without positions
    with pytest.raises(GridOutOfRangeError, match=r"\(row, col\) = \(2, 0\).*grid=\(2, 3\)") as err:
        enc.encode(grid(3, 3, prefix=1))
    assert isinstance(err.value, posenc.PositionOutOfRangeError)
    assert isinstance(err.value, ValueError)
    assert (err.value.position, err.value.limit, err.value.limit_name) == ((2, 0), (2, 3), "grid")
    with pytest.raises(GridOutOfRangeError, match=r"\(row, col\) = \(0, 3\)"):
        enc.encode(grid(2, 4, prefix=1))
    with pytest.raises(ValueError, match="cover 7 tokens, but the sequence has 5"):
        enc(torch.randn(1, 5, 4))
    with pytest.raises(TypeError, match="integer tensor"):
        enc.encode(grid(2, 3, prefix=1, normalize=True))
    with pytest.raises(ValueError, match="must be >= 0"):
        enc.encode(torch.tensor([[0, 0], [-1, 0]]))
    enc.resample((3, 3))
    assert enc(torch.randn(1, 10, 4)).shape == (1, 10, 4)


BAD_DEFAULTS = [
    (None, 0, TypeError, "seq_len"),
    ("7", 0, TypeError, "seq_len"),
    (2**70, 0, ValueError, "seq_len"),
    (-1, 0, ValueError, "seq_len"),
    (7, None, TypeError, "offset"),
    (6, True, TypeError, "offset"),
    (6, 1.0, TypeError, "offset"),
    (7, 2**70, ValueError, "offset"),
]


@pytest.mark.parametrize(("seq_len", "offset", "error", "name"), BAD_DEFAULTS)
def test_learned_2d_default_positions_name_a_wrong_length_or_offset(seq_len, offset, error, name):
    """Checked before the table's rows are counted: a huge or a string length is named,
    not a sum that fails in Python or a grid error about 2**70 tokens."""
    enc = posenc.create("learned_2d", dim=4, grid=(2, 3), prefix=1)
    with pytest.raises(error, match=name):
        enc.default_positions(seq_len, offset=offset)
    assert_close(enc.default_positions(7), grid(2, 3, prefix=1))
    with pytest.raises(ValueError, match=r"missing required config key\(s\) \['grid'\]"):
        posenc.create("learned_2d", dim=4)


def test_gradients_reach_the_table_rows_that_were_read():
    enc = posenc.create("learned_2d", dim=3, grid=(2, 3), prefix=1)
    positions = torch.tensor([[0, 0], [1, 2], [0, 1], [1, 2]])  # patch (1, 2) twice
    g = torch.randn(4, 3)
    (enc.encode(positions) * g).sum().backward()
    expected = torch.zeros(7, 3).index_add_(0, torch.tensor([0, 6, 2, 6]), g)
    assert torch.equal(enc.weight.grad, expected)  # at most two terms a row: addition commutes
    table = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)  # prefix 1, 2 x 2
    for new_grid in ((3, 1), (1, 3)):  # resampling is differentiable too
        assert torch.autograd.gradcheck(
            lambda t, g=new_grid: resample_grid_table(t, (2, 2), g, 1), table
        )


def test_learned_2d_init_reset_and_meta_device():
    enc = posenc.create("learned_2d", dim=64, grid=(16, 16), prefix=1)
    assert abs(enc.weight.std().item() - 0.02) < 0.001  # ViT's std, 16448 samples
    unit = posenc.create("learned_2d", dim=64, grid=(16, 16), init_std=1.0)
    assert abs(unit.weight.std().item() - 1.0) < 0.05
    meta = posenc.create("learned_2d", dim=4, grid=(2, 3), prefix=1, device="meta")
    out = meta(torch.randn(2, 7, 4, device="meta"))
    assert out.shape == (2, 7, 4) and out.device.type == "meta"
    meta.to_empty(device="cpu")
    with torch.no_grad():
        meta.weight.fill_(float("nan"))
    meta.reset_parameters()
    assert torch.isfinite(meta.weight).all() and meta.weight.abs().max() > 0


def test_info_and_state_dict():
    assert {"sincos_2d", "learned_2d"} <= set(posenc.available())
    sincos, learned = posenc.info("sincos_2d"), posenc.info("learned_2d")
    assert (sincos.kind, sincos.trainable, sincos.relative, sincos.extrapolates) == (
        "additive",
        False,
        False,
        True,
    )
    assert (learned.kind, learned.trainable, learned.extrapolates) == ("additive", True, False)
    assert posenc.create("sincos_2d", dim=8).state_dict() == {}
    assert list(posenc.create("learned_2d", dim=8, grid=(2, 2)).state_dict()) == ["weight"]


@pytest.mark.parametrize("name", ["sincos_2d", "learned_2d"])
def test_compile_fullgraph_with_prefix_and_batched_positions(name, tol):
    enc = posenc.create(name, dim=8, grid=(2, 3), prefix=1)
    x = torch.randn(2, 7, 8)
    positions = torch.stack((grid(2, 3, 1), grid(2, 3, 1).flip(0)))  # [2, 7, 2]
    torch._dynamo.reset()
    try:
        compiled = torch.compile(enc, backend="aot_eager", fullgraph=True)
        # aot_eager may decompose ops: sin/cos of other shapes
        assert_close(compiled(x), enc(x), **table_tol(tol))
        assert_close(compiled(x, positions), enc(x, positions), **table_tol(tol))
    finally:
        torch._dynamo.reset()


def test_compose_adds_both_grid_encodings():
    spec = {"grid": (2, 3), "prefix": 1}
    enc = posenc.compose({"name": "sincos_2d", **spec}, {"name": "learned_2d", **spec}, dim=8)
    sincos, learned = enc.encodings
    positions = grid(2, 3, 1)
    x = torch.randn(1, 7, 8)
    assert_close(enc(x), x + sincos.encode(positions) + learned.encode(positions))

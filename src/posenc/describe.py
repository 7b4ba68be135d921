"""What an encoding is, for people: its configuration keys with their meaning, and an example.

``posenc info NAME`` and the documentation's page per encoding read an encoding from here
(its formula and paper are in :func:`posenc.info`):

- :func:`config_keys`: every key of the encoding's ``Config``, in order, with its type, its
  default as text and its meaning, taken from the ``Attributes:`` section of the Config's
  docstring (Google style), or of a base config's along the MRO for inherited keys.
- :func:`example`: a minimal Python program that builds the encoding and uses it the way
  its kind is used; it runs as is.

Example:
    >>> [key.name for key in config_keys("learned")]
    ['dim', 'max_positions', 'init_std']
    >>> config_keys("learned")[1].default
    '2048'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import registry
from .base import InputBias, InputTransforms
from .docstrings import plain, section

__all__ = ["ConfigKey", "attribute_docs", "config_keys", "example"]

#: the default shown for the key a model fills in with its own size (``dim``, ``head_dim``,
#: ``n_heads``: the class's ``size_key``)
SIZE_KEY_DEFAULT = "required (a model fills it in)"
REQUIRED = "required"


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One configuration key of an encoding.

    Attributes:
        name: the key, as passed to :func:`posenc.create`.
        type: its annotation as written in the Config (``"int"``, ``"float | None"``).
        default: its default as text: the ``repr`` of the value, ``"required"``, or
            ``"required (a model fills it in)"`` for the encoding's size key.
        meaning: what it sets, from the Config's docstring (continuation lines joined,
            reST markup as plain text with Markdown code spans:
            :func:`~posenc.docstrings.plain`).
    """

    name: str
    type: str
    default: str
    meaning: str


def attribute_docs(doc: str | None) -> dict[str, str]:
    """The entries of the ``Attributes:`` section of a Google-style docstring, their text
    as :func:`~posenc.docstrings.plain` text (:func:`posenc.docstrings.section` parses).

    Example:
        >>> attribute_docs('''Config.
        ...
        ...     Attributes:
        ...         base: the wavelength base,
        ...             ``10000`` in the paper.
        ...         layout: the pair layout.
        ...     ''')
        {'base': 'the wavelength base, `10000` in the paper.', 'layout': 'the pair layout.'}
    """
    return {name: plain(text) for name, text in section(doc, "Attributes").items()}


def _meanings(config: type) -> dict[str, str]:
    """Each documented key's meaning, from the most derived config along the MRO."""
    meanings: dict[str, str] = {}
    for cls in config.__mro__:
        for name, text in attribute_docs(cls.__dict__.get("__doc__")).items():
            meanings.setdefault(name, text)
    return meanings


def _default_text(field: dataclasses.Field[Any], size_key: str | None) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return repr(field.default_factory())
    return SIZE_KEY_DEFAULT if field.name == size_key else REQUIRED


def config_keys(name: str) -> list[ConfigKey]:
    """Every configuration key of encoding ``name``, in the Config's field order.

    A key the Config's docstrings (along its MRO) do not describe raises ``ValueError``:
    every key must say what it means.

    Example:
        >>> key = config_keys("rope")[0]
        >>> key.name, key.type, key.default
        ('head_dim', 'int', 'required (a model fills it in)')
        >>> key.meaning
        'size of each attention head (even).'
    """
    cls = registry.get(name)
    meanings = _meanings(cls.Config)
    keys = []
    for field in dataclasses.fields(cls.Config):
        meaning = meanings.get(field.name, "").strip()
        if not meaning:
            raise ValueError(
                f"{cls.Config.__qualname__} of {name!r} does not describe its key "
                f"{field.name!r}: add it to the Attributes section of its docstring"
            )
        kind = field.type if isinstance(field.type, str) else field.type.__name__
        keys.append(ConfigKey(field.name, str(kind), _default_text(field, cls.size_key), meaning))
    return keys


#: the sizes of every example: a batch of 2 sequences of 16 tokens, 4 heads of 16 dimensions
BATCH, SEQ, HEADS, HEAD_DIM, DIM = 2, 16, 4, 16, 64
#: the patch grid of image encodings: SEQ patches
GRID = (4, 4)
#: the value an example gives each required key, by its name
EXAMPLE_VALUES: dict[str, Any] = {"dim": DIM, "head_dim": HEAD_DIM, "n_heads": HEADS, "grid": GRID}
#: the positions of encodings whose positions are not token indices (times, M-RoPE's ids)
TIMES = f"positions = torch.rand({SEQ}).cumsum(0)  # irregularly spaced times, any unit"
SPECIAL_POSITIONS: dict[str, tuple[str, ...]] = {
    "timestamp": (TIMES,),
    "time2vec": (TIMES,),
    "calendar": (
        f"positions = 1_700_000_000 + 3600 * torch.arange({SEQ})  # hourly, unix seconds",
    ),
    "mrope": (
        "# text, an image of 4 x 8 patches (8 tokens after merging 2 x 2), text",
        "ids = torch.tensor([[1, 2, 3, 4] + [7] * 8 + [5, 6, 8, 9]])",
        "positions, _ = posenc.positions.multimodal(",
        "    ids, torch.tensor([[1, 4, 8]]), image_token_id=7, video_token_id=10",
        ")  # [3, 1, seq]: the (t, h, w) ids of each token",
    ),
}
GRID_POSITIONS = (
    f"positions = posenc.positions.grid{GRID}  # [seq, 2]: (row, column) of each patch",
)


#: the video latents of ``rope_3d``: SEQ tokens, 2 frames of the grid's half
VIDEO_POSITIONS = (
    f"positions = posenc.positions.video_grid(2, {GRID[0] // 2}, {GRID[1]})  "
    "# [seq, 3]: (frame, row, column)",
)


def _positions(name: str, cls: type[Any]) -> tuple[str, ...]:
    """The lines that make the example's positions; none when the defaults serve."""
    if name in SPECIAL_POSITIONS:
        return SPECIAL_POSITIONS[name]
    return {2: GRID_POSITIONS, 3: VIDEO_POSITIONS}.get(cls.position_axes, ())


def example(name: str) -> str:
    """A minimal program that builds encoding ``name`` and uses it as its kind is used.

    The required keys get small sizes (:data:`EXAMPLE_VALUES`); an additive encoding is
    added to token embeddings ``[batch, seq, dim]``, a rotary one rotates queries and keys
    ``[batch, heads, seq, head_dim]``, a bias (and ``nope``) runs in
    :func:`posenc.attention`. Image encodings take grid coordinates, time encodings
    times, M-RoPE its ``(t, h, w)`` ids. The program prints the output shape, and a comment
    says which.

    Example:
        >>> print(example("sinusoidal"))
        import torch
        <BLANKLINE>
        import posenc
        <BLANKLINE>
        enc = posenc.create("sinusoidal", dim=64)
        x = torch.randn(2, 16, 64)  # [batch, seq, dim]: token embeddings
        y = enc(x)  # x plus the encoding of positions 0 .. seq - 1
        print(y.shape)  # torch.Size([2, 16, 64])
        <BLANKLINE>
    """
    cls = registry.get(name)
    args = [f'"{name}"']
    for key in cls.Config.required_keys():
        if key not in EXAMPLE_VALUES:
            raise ValueError(f"no example value for the required key {key!r} of {name!r}")
        args.append(f"{key}={EXAMPLE_VALUES[key]!r}")
    lines = ["import torch", "", "import posenc", "", f"enc = posenc.create({', '.join(args)})"]
    positions = _positions(name, cls)
    heads = f"{BATCH}, {HEADS}, {SEQ}, {HEAD_DIM}"
    if cls.kind == "additive":
        lines.append(
            f"x = torch.randn({BATCH}, {SEQ}, {DIM})  # [batch, seq, dim]: token embeddings"
        )
        lines.extend(positions)
        if positions:
            lines.append("y = enc(x, positions)  # x plus the encoding of each position")
        else:
            lines.append("y = enc(x)  # x plus the encoding of positions 0 .. seq - 1")
        lines.append(f"print(y.shape)  # torch.Size([{BATCH}, {SEQ}, {DIM}])")
    elif cls.kind == "rotary":
        lines.append(f"q = torch.randn({heads})  # [batch, heads, seq, head_dim]")
        lines.append(f"k = torch.randn({heads})")
        lines.extend(positions)
        call = "enc(q, k, positions)" if positions else "enc(q, k)"
        lines.append(f"q, k = {call}  # rotated by their positions")
        width = HEAD_DIM * getattr(cls, "width_factor", 1)  # PoPE doubles q and k
        out = f"{BATCH}, {HEADS}, {SEQ}, {width}"
        lines.append(f"print(q.shape, k.shape)  # torch.Size([{out}]) torch.Size([{out}])")
    elif cls.kind in ("bias", "none"):
        lines.append(f"q, k, v = torch.randn(3, {heads}).unbind()  # [batch, heads, seq, head_dim]")
        lines.extend(positions)
        where = ", q_positions=positions, k_positions=positions" if positions else ""
        if issubclass(cls, InputBias):  # FoX: the bias is a clock of the layer input
            x = f"x = torch.randn({BATCH}, {SEQ}, {DIM})"
            lines.append(f"{x}  # [batch, seq, dim]: the layer's input")
            where += ", bias=enc.clock(x)"
        elif issubclass(cls, InputTransforms):  # PaTH: transforms of the layer input
            x = f"x = torch.randn({BATCH}, {SEQ}, {DIM})"
            lines.append(f"{x}  # [batch, seq, dim]: the layer's input")
            where += ", bias=enc.transforms(x)"
        lines.append(f"out = posenc.attention(q, k, v, encoding=enc, causal=True{where})")
        lines.append(f"print(out.shape)  # torch.Size([{heads}])")
    else:
        raise ValueError(f"no example for the kind {cls.kind!r} of {name!r}")
    return "\n".join(lines) + "\n"

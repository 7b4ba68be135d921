"""Follow ``encoding`` from ``posenc.attention`` through the attention wing: the functions
of ``posenc/attn/`` it is handed to; with ``--package``, through the whole package.

A stop is a call of a function under ``posenc/attn/`` one of whose arguments is the
encoding (or a record holding it: an attention call); consecutive calls in one file are one
stop, and the encoding's own files (its hooks) are not counted. With ``--package`` a stop
is such a call anywhere under ``posenc/``, the encoding's own methods (``self``) and the
base classes' included: every file the encoding is handed to. A return is a stop in a file
the walk had already left. Run: ``python scripts/walk_encoding.py [--package]`` (issue 39
asked for at most 5 returns in the wing, issue 53 at most 5 in the package; each call is
walked twice, the first run and the second, whose per-call work was done once already,
and the worse counts). ``tests/test_walk_encoding.py`` holds the package to it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

import posenc

SRC = str(Path(posenc.__file__).parent) + "/"
WING = SRC + "attn/"


def walk(call, encoding, root: str = WING) -> list[str]:
    """The files, in order, of the posenc functions under ``root`` (the attention wing, or
    ``SRC``: the package) ``encoding`` reaches during ``call()``."""
    stops: list[str] = []

    def holds(value) -> bool:
        return value is encoding or getattr(value, "encoding", None) is encoding

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(root):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(holds(frame.f_locals.get(n)) for n in names):
            where = frame.f_code.co_filename[len(SRC) :]
            if not stops or stops[-1] != where:
                stops.append(where)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return stops


def returns(stops: list[str]) -> int:
    seen: set[str] = set()
    count = 0
    for where in stops:
        count += where in seen
        seen.add(where)
    return count


def cases() -> dict[str, tuple[posenc.Encoding, dict[str, Any]]]:
    """The calls walked, by name: each bias encoding's paths (padding, the explicit softmax,
    a window) and a rotary and an input-bias encoding, on q, k, v ``[2, 4, 16, 8]``."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    pad = torch.ones(2, 16, dtype=torch.bool)
    pad[1, :3] = False
    fox: Any = posenc.create("fox", n_heads=4, dim=8)  # its clock(): not an Encoding's
    clock = fox.clock(torch.randn(2, 16, 8))
    cases: dict[str, tuple[posenc.Encoding, dict[str, Any]]] = {
        "alibi, padding": (posenc.create("alibi", n_heads=4), {"key_padding_mask": pad}),
        "t5": (posenc.create("t5", n_heads=4), {}),
        "t5, padding, math": (
            posenc.create("t5", n_heads=4),
            {"key_padding_mask": pad, "backend": "math"},
        ),
        "fire, window": (posenc.create("fire", n_heads=4), {"window": 4}),
        "rope, window": (posenc.create("rope", head_dim=8), {"window": 4}),
        "fox, padding": (fox, {"bias": clock, "key_padding_mask": pad}),
    }
    return {
        name: (enc, {"q": q, "k": k, "v": v, **kwargs}) for name, (enc, kwargs) in cases.items()
    }


def worst(name: str, root: str = WING) -> tuple[int, list[str]]:
    """The most returns of the first and the second walk of case ``name`` (a fresh
    encoding each time the cases are built), with that walk's stops."""
    enc, kwargs = cases()[name]

    def call():
        return posenc.attention(encoding=enc, **kwargs)

    walks = [walk(call, enc, root), walk(call, enc, root)]  # cold, then with its work kept
    stops = max(walks, key=returns)
    return returns(stops), stops


def main() -> None:
    root = SRC if "--package" in sys.argv[1:] else WING
    for name in cases():
        count, stops = worst(name, root)
        print(f"{name}: {len(stops)} stops in {len(set(stops))} files, {count} returns")
        print("    " + " > ".join(stops))


if __name__ == "__main__":
    main()

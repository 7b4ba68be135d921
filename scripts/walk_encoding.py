"""Follow ``encoding`` from ``posenc.attention`` through the attention wing: the functions
of ``posenc/attn/`` it is handed to.

A stop is a call of a function under ``posenc/attn/`` one of whose arguments is the
encoding (or a record holding it: an attention call); consecutive calls in one file are one
stop, and the encoding's own files (its hooks) are not counted. A return is a stop in a
file the walk had already left. Run: ``python scripts/walk_encoding.py`` (issue 39 asked
for at most 5 returns).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import posenc

SRC = str(Path(posenc.__file__).parent) + "/"
WING = SRC + "attn/"


def walk(call, encoding) -> list[str]:
    """The files, in order, of the posenc functions ``encoding`` reaches during ``call()``."""
    stops: list[str] = []

    def holds(value) -> bool:
        return value is encoding or getattr(value, "encoding", None) is encoding

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(WING):
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


def main() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    pad = torch.ones(2, 16, dtype=torch.bool)
    pad[1, :3] = False
    fox = posenc.create("fox", n_heads=4, dim=8)
    clock = fox.clock(torch.randn(2, 16, 8))
    cases = {
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
    for name, (enc, kwargs) in cases.items():

        def call(enc=enc, kwargs=kwargs):
            return posenc.attention(q, k, v, enc, **kwargs)

        call()  # caches warm
        stops = walk(call, enc)
        print(f"{name}: {len(stops)} stops in {len(set(stops))} files, {returns(stops)} returns")
        print("    " + " > ".join(stops))


if __name__ == "__main__":
    main()

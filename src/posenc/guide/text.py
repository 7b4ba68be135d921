"""The guide as plain text: one block per situation (the question and its flag, the
encodings to use, why, and what an arena run measured), wrapped to a width."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from .advice import Advice
from .situations import FLAGS

__all__ = ["NO_RUN_HINT", "render"]

#: what the guide says when no arena run gives it numbers
NO_RUN_HINT = (
    "no arena run found, so no measured evidence: `posenc arena run all --preset quick` "
    "(about 4 minutes on 2 cores) measures it, then run posenc guide again in the same "
    "directory, or pass --run DIR"
)


def _wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """``text`` wrapped at spaces only: flags and names keep their hyphens whole."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _block(label: str, text: str, width: int) -> list[str]:
    first = f"  {label:<10}"
    return _wrap(text, width, first, " " * len(first)) or [first]


def render(advice: Sequence[Advice], run: str | Path | None = None, width: int = 100) -> str:
    """``advice`` (from :func:`posenc.guide.guide`) as text ``width`` columns wide; the
    first line names the arena ``run`` the evidence comes from, or says how to get one.

    >>> from posenc.guide import guide
    >>> print(render(guide(["video"]), width=80))
    Evidence: no arena run found, so no measured evidence: `posenc arena run all
      --preset quick` (about 4 minutes on 2 cores) measures it, then run posenc
      guide again in the same directory, or pass --run DIR
    <BLANKLINE>
    Video or images interleaved with text (multimodal)  [--video]
      use:      mrope
      why:      M-RoPE gives every token (temporal, height, width) ids and splits
                the rotary pairs among them; text tokens get equal ids, so text is
                plain RoPE and a language model's RoPE carries over (Qwen2-VL, Wang
                et al. 2024).
    <BLANKLINE>
    """
    if width < 40:
        raise ValueError(f"width: expected at least 40 columns, got {width}")
    if run is not None:  # a path is not wrapped
        lines = [f"Evidence: the arena run {run}"]
    else:
        lines = _wrap(f"Evidence: {NO_RUN_HINT}", width, rest="  ")
    for a in advice:
        s = a.situation
        flags = " ".join(FLAGS[n] for n in s.needs)
        lines += ["", *_wrap(f"{s.question}  [{flags}]", width)]
        lines += _block("use:", ", ".join(s.recommend), width)
        lines += _block("why:", s.why, width)
        for i, line in enumerate(a.evidence):
            lines += _block("measured:" if i == 0 else "", line, width)
        if run is not None and s.measured and not a.evidence:
            lines += _block("measured:", "this run did not measure it", width)
    return "\n".join(lines) + "\n"

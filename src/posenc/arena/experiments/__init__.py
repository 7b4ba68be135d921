"""The arena's experiments, one module each, listed in :data:`EXPERIMENTS` in report order.

Each module has ``NAME`` and ``run(ctx: RunContext) -> None``; :func:`get` imports it on
first use. Adding an experiment: its module here and one line in :data:`EXPERIMENTS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runner import RunContext

__all__ = ["EXPERIMENTS", "get"]

#: experiment name -> its module in this package, in the order runs and reports follow
EXPERIMENTS: dict[str, str] = {
    "extrapolation": "extrapolation",
    "context-extension": "context_extension",
    "length-generalization": "length_generalization",
    "nope-needs-causality": "nope_causality",
    "lost-in-the-middle": "lost_in_the_middle",
}


def get(name: str) -> Callable[[RunContext], None]:
    """The ``run`` function of experiment ``name``.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {[*EXPERIMENTS, 'all']}")
    module = importlib.import_module(f"{__name__}.{EXPERIMENTS[name]}")
    run: Callable[[RunContext], None] = module.run
    return run

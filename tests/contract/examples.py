"""Every area's examples, registered into :data:`~tests.contract.registry.EXAMPLES` by
importing its module (one module per public package, so the areas grow apart)."""

from __future__ import annotations

from tests.contract import (  # noqa: F401 - imported for their registrations
    examples_core,
    examples_encodings,
    examples_functional,
    examples_hf,
    examples_models,
    examples_positions,
    examples_rope,
)
from tests.contract.registry import EXAMPLES, EXEMPT, Example, public_callables

__all__ = ["EXAMPLES", "EXEMPT", "Example", "public_callables"]

"""Valid calls of the public callables of posenc's positions area (see tests/contract/registry.py)."""

from __future__ import annotations

import torch

import posenc
from tests.contract.registry import EXEMPT, call, example

__all__: list[str] = []

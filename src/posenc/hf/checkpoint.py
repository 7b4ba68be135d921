"""The old path of :mod:`posenc.hf.inspect.checkpoint` (before the checkpoint report moved
under :mod:`posenc.hf.inspect`): its names, for code that imports them from here."""

from .inspect.checkpoint import CheckpointReport, RotaryFacts, inspect_checkpoint, read_config

__all__ = ["CheckpointReport", "RotaryFacts", "inspect_checkpoint", "read_config"]

"""Model weights and training checkpoints in a run directory: safetensors weights, the rest
of the training state (``torch.save``, read back with ``weights_only=True``: loading never
runs code) and ``checkpoint.json``, written last, the commit marker naming both files and
their sha256. Every file is written atomically (:mod:`.atomic`)."""

from __future__ import annotations

import hashlib
import io
import pickle
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from safetensors import SafetensorError
from torch import nn

from .atomic import atomic_write_bytes, atomic_write_json, read_json

__all__ = [
    "load_checkpoint",
    "load_weights",
    "rng_state",
    "save_checkpoint",
    "save_weights",
    "set_rng_state",
]


def save_weights(path: str | Path, module: nn.Module) -> None:
    """Write ``module.state_dict()`` as safetensors, atomically."""
    atomic_write_bytes(path, _weights_bytes(module))


def _weights_bytes(module: nn.Module) -> bytes:
    # contiguous CPU copies: safetensors refuses views and shared storage (tied weights)
    tensors = {
        name: t.detach().cpu().clone(memory_format=torch.contiguous_format)
        for name, t in module.state_dict().items()
    }
    return safetensors.torch.save(tensors)


def load_weights(path: str | Path, module: nn.Module) -> None:
    """Load safetensors weights into ``module``; ``ValueError`` naming ``path`` when it is not
    safetensors or its keys or shapes differ from the module's."""
    try:
        tensors = safetensors.torch.load(Path(path).read_bytes())
    except SafetensorError as e:
        raise ValueError(f"{path}: not a safetensors file ({e})") from e
    expected = module.state_dict()
    missing = sorted(expected.keys() - tensors.keys())
    extra = sorted(tensors.keys() - expected.keys())
    shapes = [k for k, v in expected.items() if k in tensors and tensors[k].shape != v.shape]
    if missing or extra or shapes:
        msg = f"missing keys {missing}, extra keys {extra}, other shapes for {shapes}"
        raise ValueError(f"{path}: weights do not fit the module: {msg}")
    module.load_state_dict(tensors, strict=True)


def save_checkpoint(directory: str | Path, module: nn.Module, state: dict[str, Any]) -> None:
    """Write ``model-<step>.safetensors``, ``state-<step>.pt``, then ``checkpoint.json`` (the
    commit marker), then delete older steps' files. New names: a save interrupted anywhere
    leaves the previous checkpoint.json naming the previous, intact files.

    Args:
        directory: the checkpoint directory (created).
        module: its ``state_dict()`` becomes the weights.
        state: the rest, with an int ``"step"``: optimizer state_dict, RNG states as tensors,
            plain Python values (what ``torch.load(weights_only=True)`` reads back).
    """
    directory = Path(directory)
    step = state["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"state['step'] must be an int >= 0, got {step!r}")
    # serialised before any write: a state that cannot be saved touches nothing
    buffer = io.BytesIO()
    torch.save(state, buffer)
    contents = {f"model-{step}.safetensors": _weights_bytes(module)}
    contents[f"state-{step}.pt"] = buffer.getvalue()
    for name, data in contents.items():
        atomic_write_bytes(directory / name, data)
    files = {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}
    atomic_write_json(directory / "checkpoint.json", {"step": step, "files": files})
    # older steps' files, and temporary files of writes a kill interrupted
    stale = ["model-*.safetensors", "state-*.pt", ".model-*.tmp", ".state-*.tmp"]
    for old in [p for pattern in stale for p in directory.glob(pattern)]:
        if old.name not in files:
            old.unlink(missing_ok=True)


def load_checkpoint(directory: str | Path, module: nn.Module) -> dict[str, Any] | None:
    """Load the checkpoint in ``directory`` into ``module``.

    Returns:
        ``None`` without a ``checkpoint.json``; else the saved ``state``, read with
        ``weights_only=True`` (tensors and plain values only: no code is unpickled).

    Raises:
        ValueError: naming the file: a sha256 other than checkpoint.json's (a save was
            interrupted, or the file is damaged), weights that do not fit ``module``, or a
            state holding other objects.
    """
    directory = Path(directory)
    marker = directory / "checkpoint.json"
    if not marker.exists():
        return None
    files: dict[str, str] = read_json(marker)["files"]
    model = [n for n in files if n.startswith("model-") and Path(n).name == n]
    state = [n for n in files if n.startswith("state-") and Path(n).name == n]
    if len(model) != 1 or len(state) != 1 or len(files) != 2:
        raise ValueError(f"{marker}: expected one model-* and one state-* file, got {files}")
    for name, digest in files.items():
        if hashlib.sha256((directory / name).read_bytes()).hexdigest() != digest:
            raise ValueError(f"{directory / name}: sha256 does not match {marker}")
    load_weights(directory / model[0], module)
    path = directory / state[0]
    try:
        return torch.load(io.BytesIO(path.read_bytes()), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{path}: holds more than tensors and plain values ({e})") from e


def rng_state() -> dict[str, Any]:
    """The global torch RNG states: ``{"torch": tensor, "cuda": [tensor per device]}``."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {"torch": torch.get_rng_state(), "cuda": cuda}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s result; ``ValueError`` when it has CUDA states but not one
    per device of this machine."""
    torch.set_rng_state(state["torch"])
    if cuda := state["cuda"]:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if len(cuda) != count:
            raise ValueError(f"RNG state for {len(cuda)} CUDA devices; this machine has {count}")
        torch.cuda.set_rng_state_all(cuda)

"""llama.cpp's rotation of a config: the GGUF metadata its own converter writes
(:mod:`~posenc.engines.gguf_worker`, run on the llama.cpp source folder that
``POSENC_LLAMA_CPP`` names; ``make test-engines`` unpacks the one llama-cpp-python 0.3.36
vendors), or that a GGUF file holds (:func:`read_gguf`), turned into rotations by
llama.cpp's rules (:mod:`~posenc.engines.gguf_rope`), in a context of
``{arch}.context_length`` tokens (llama.cpp's ``n_ctx = 0``): it serves the positions
below it, and LongRoPE takes its factors by it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .compare import Answer, Job, pair_count
from .gguf_rope import gguf_rope, rope_cache
from .worker import EngineUnavailable, run_worker

__all__ = [
    "LLAMA_CPP",
    "ROPE_TENSORS",
    "gguf_file_engine",
    "gguf_metadata",
    "llama_cpp_folder",
    "llama_tables",
    "metadata_tables",
    "read_gguf",
]

#: the environment variable that names a llama.cpp source folder (its converter)
LLAMA_CPP = "POSENC_LLAMA_CPP"
#: the tensors of a GGUF file that change its rotation
ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def llama_cpp_folder() -> str:
    """The llama.cpp source folder, from ``POSENC_LLAMA_CPP``.

    Raises:
        EngineUnavailable: it is not set, or holds no ``convert_hf_to_gguf.py``.
    """
    folder = os.environ.get(LLAMA_CPP)
    if not folder:
        raise EngineUnavailable(
            f"not run: set {LLAMA_CPP} to a llama.cpp source folder (make test-engines)"
        )
    if not (Path(folder) / "convert_hf_to_gguf.py").is_file():
        raise EngineUnavailable(f"not run: {LLAMA_CPP}={folder!r} has no convert_hf_to_gguf.py")
    return folder


def llama_tables(config: Any, jobs: list[Job]) -> list[Answer]:
    """llama.cpp's answer to each job: :func:`metadata_tables` of :func:`gguf_metadata`."""
    return metadata_tables(gguf_metadata(config), jobs)


def gguf_metadata(config: Any) -> dict[str, Any]:
    """The GGUF metadata llama.cpp's converter writes for ``config`` (a transformers config;
    its ``architectures``, if unset, is the model type's causal LM class): ``{"arch",
    "class", "kv", "tensors"}``, or ``{"error"}`` (:mod:`~posenc.engines.gguf_worker`).

    Raises:
        EngineUnavailable: no llama.cpp folder, or the worker failed as a whole.
    """
    folder = llama_cpp_folder()
    with tempfile.TemporaryDirectory() as work:
        saved = type(config).from_dict(config.to_dict())
        if not getattr(saved, "architectures", None):
            saved.architectures = [_causal_lm(config.model_type)]
        saved.save_pretrained(work)
        request = {"config": work, "llama_cpp": str(Path(folder).resolve())}
        answer: dict[str, Any] = run_worker(
            sys.executable, "gguf_worker.py", request, work, "llama.cpp"
        )
    return answer


def _causal_lm(model_type: str) -> str:
    """The model class a checkpoint of ``model_type`` names: its causal LM, else its
    image-text-to-text, masked LM or bare model class."""
    from transformers.models.auto import modeling_auto as auto

    for mapping in (auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                    auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
                    auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, auto.MODEL_MAPPING_NAMES):  # fmt: skip
        name = mapping.get(model_type)
        if isinstance(name, str):
            return name
    return f"{model_type}ForCausalLM"


def metadata_tables(meta: dict[str, Any], jobs: list[Job]) -> list[Answer]:
    """Each job's ``(cos, sin)`` as llama.cpp rotates the model of GGUF metadata ``meta``
    (:func:`gguf_metadata`'s answer), at the job's positions below the context."""
    if "error" in meta:
        return [f"not run: {meta['error']}"] * len(jobs)
    kv, tensors = meta["kv"], meta["tensors"]
    context = kv.get(f"{meta['arch']}.context_length")
    if context is None:  # llama.cpp requires it
        return [f"not run: the metadata has no {meta['arch']}.context_length"] * len(jobs)
    n_ctx = int(context)
    answers: list[Answer] = []
    for rope, positions, layer_type in jobs:
        try:
            read = gguf_rope(kv, tensors, layer_type, n_ctx)
        except ValueError as why:
            answers.append(f"not run: {why}")
            continue
        pairs = pair_count(rope, positions)
        if read.n_rot // 2 != pairs:
            answers.append(
                f"not compared: llama.cpp rotates {read.n_rot // 2} pairs, posenc {pairs}"
            )
            continue
        served = positions[positions < n_ctx]
        cos, sin = rope_cache(read, served)
        ran = f"{meta['arch']}: {read.source}"
        answers.append(((cos.double(), sin.double()), ran, served))
    return answers


def read_gguf(path: str | Path) -> dict[str, Any]:
    """A GGUF file's metadata as :func:`gguf_metadata` answers it: its key-values (the
    tokenizer's left out) and its rope tensors (:data:`ROPE_TENSORS`), read with the
    ``gguf`` package (llama.cpp's own; ``pip install 'posenc[gguf]'``).

    Raises:
        ValueError: the file is missing or is no GGUF file.
    """
    import gguf

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"gguf: {str(path)!r} is no file")
    try:
        reader = gguf.GGUFReader(path)
    except ValueError as why:
        raise ValueError(f"gguf: {str(path)!r} is no GGUF file ({why})") from None
    kv = {key: field.contents() for key, field in reader.fields.items()
          if not key.startswith(("tokenizer.", "GGUF."))}  # fmt: skip
    tensors = {t.name: [float(v) for v in t.data.flatten()] for t in reader.tensors
               if t.name in ROPE_TENSORS}  # fmt: skip
    arch = kv.get("general.architecture")
    if arch is None:
        raise ValueError(f"gguf: {str(path)!r} has no general.architecture")
    return {"arch": arch, "class": path.name, "kv": kv, "tensors": tensors}


def gguf_file_engine(path: str | Path) -> Any:
    """An engine (``(config, jobs) -> answers``) that rotates by the metadata of the GGUF
    file at ``path`` (:func:`read_gguf`), instead of converting the config."""
    found = read_gguf(path)

    def engine(config: Any, jobs: list[Job]) -> list[Answer]:
        return metadata_tables(found, jobs)

    return engine

"""The GGUF metadata llama.cpp's converter writes for a Hugging Face config.

Run by :func:`posenc.engines.llama_engine.gguf_metadata` as a script (with any Python that
has torch, numpy and transformers): it imports nothing of posenc, reads one JSON request
on stdin and writes one JSON answer on stdout. The request: ``config`` (a folder with a
``config.json`` whose ``architectures`` names the model class) and ``llama_cpp`` (a
llama.cpp source folder: its ``conversion`` package and ``gguf-py``, as
``convert_hf_to_gguf.py`` uses them).

The converter's own model class for the architecture is built on the config with no
weights, and asked for what ``convert_hf_to_gguf.py`` writes before the weights: its
``set_gguf_parameters`` (the ``{arch}.rope.*`` keys among them) and its
``generate_extra_tensors`` (``rope_freqs`` for Llama 3's scaling, ``rope_factors_long``
and ``rope_factors_short`` for LongRoPE). The answer: ``{"arch": ..., "class": ...,
"kv": {key: value}, "tensors": {name: [...]}}``, or ``{"error": ...}`` for an
architecture the converter does not know or a config it refuses.
"""

import json
import sys
from pathlib import Path


def converter(root, folder):
    """The ``gguf`` package and the converter's model class for the model in ``folder``,
    from the llama.cpp source folder ``root`` (as ``convert_hf_to_gguf.py`` finds them);
    and the folder's hyperparameters."""
    sys.path[:0] = [root, f"{root}/gguf-py"]
    import gguf
    from conversion import get_model_architecture, get_model_class  # type: ignore[import-not-found]
    from conversion.base import ModelBase, ModelType  # type: ignore[import-not-found]

    hparams = ModelBase.load_hparams(folder, False)
    return gguf, get_model_class(get_model_architecture(hparams, ModelType.TEXT)), hparams


def metadata(request):
    folder = Path(request["config"])
    gguf, cls, _ = converter(request["llama_cpp"], folder)
    cls.index_tensors = lambda self, **_: {}  # no weights: the metadata only
    model = cls(folder, gguf.LlamaFileType.ALL_F32, None, eager=True)
    model.set_gguf_parameters()
    tensors = {
        tensor_name: [float(v) for v in tensor.float().flatten().tolist()]
        for tensor_name, tensor in model.generate_extra_tensors()
    }
    kv = {key: _plain(value.value) for key, value in model.gguf_writer.kv_data[0].items()}
    return {"arch": model.gguf_writer.arch, "class": cls.__name__, "kv": kv, "tensors": tensors}


def _plain(value):
    """A GGUF value as JSON: numbers, strings and lists of them."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "item"):
        return value.item()
    return value


def main():
    request = json.load(sys.stdin)
    try:
        answer = metadata(request)
    except (NotImplementedError, KeyError, ValueError, TypeError) as why:
        answer = {"error": f"llama.cpp's converter: {type(why).__name__}: {why}"}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()

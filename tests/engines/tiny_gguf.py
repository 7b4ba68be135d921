"""Convert a tiny random model folder to a float32 GGUF file with llama.cpp's own converter.

Run as a script (by ``tests/engines/test_llama_cpp.py``, with the test's Python): one JSON
request on stdin, ``{"model": folder, "llama_cpp": source folder, "out": file}``. The
converter's model class for the architecture writes everything, as
``convert_hf_to_gguf.py --outtype f32`` does, but the vocabulary: a random model has no
tokenizer, so the vocabulary is a list of placeholder pieces (an SPM vocabulary, which
llama.cpp loads without a tokenizer model), one per embedding row, and a
``tokenizer.json`` of as many entries for the converters that count them (Gemma's).
"""

import json
import sys
from pathlib import Path

from posenc.engines.gguf_worker import converter


def convert(request):
    folder = Path(request["model"])
    gguf, cls, hparams = converter(request["llama_cpp"], folder)
    n = int(hparams.get("vocab_size") or hparams.get("text_config", {})["vocab_size"])
    # Gemma's converter counts the embedding rows to keep in the tokenizer's vocabulary
    vocab = {"model": {"vocab": {f"t{i}": i for i in range(n)}}, "added_tokens": []}
    (folder / "tokenizer.json").write_text(json.dumps(vocab))
    model = cls(folder, gguf.LlamaFileType.ALL_F32, Path(request["out"]), eager=True)

    def placeholder_vocab():
        writer = model.gguf_writer
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, n)])
        writer.add_token_scores([0.0] * n)
        writer.add_token_types([2, 3, 3] + [1] * (n - 3))
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_add_bos_token(False)

    model.set_vocab = placeholder_vocab
    model.write()


if __name__ == "__main__":
    convert(json.load(sys.stdin))

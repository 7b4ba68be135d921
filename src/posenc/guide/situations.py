"""The when-to-use guide as data: the needs a reader can name and the situations they select.

The situations follow the when-to-use list of the article this project is built around,
plus the domains it describes (images, video with text, time series). Where posenc's own
arena measured something else than the article says (plain RoPE past its training length),
the situation says both.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FLAGS", "NEEDS", "SITUATIONS", "Situation"]

#: need -> what it means; each need is one flag of ``posenc guide`` (:data:`FLAGS`)
NEEDS: dict[str, str] = {
    "simple": "a simple baseline with nothing to train",
    "fixed-length": "one fixed sequence length, and the best fit on one dataset",
    "extrapolation": "inputs longer than anything the model was trained on",
    "distance-grammar": "what matters is the distance between tokens, not where they are",
    "general-llm": "a modern general-purpose language model",
    "low-memory": "relative positions without their memory and cache cost",
    "vision": "images: patches on a 2-D grid",
    "video": "video or images interleaved with text",
    "time-series": "time series: real timestamps, uneven steps, seasonality",
}

#: need -> its flag on the command line (``--need-extrapolation`` is the issue's name)
FLAGS: dict[str, str] = {
    need: "--need-extrapolation" if need == "extrapolation" else f"--{need}" for need in NEEDS
}


@dataclass(frozen=True)
class Situation:
    """One answer of the guide.

    ``key`` names it; ``question`` is the situation in one line; ``needs`` are the needs
    (keys of :data:`NEEDS`) that select it; ``recommend`` the registered encodings to use,
    best first; ``why`` the reasons, with the papers; ``measured`` the arena experiments
    whose numbers bear on it (``()``: none does).
    """

    key: str
    question: str
    needs: tuple[str, ...]
    recommend: tuple[str, ...]
    why: str
    measured: tuple[str, ...] = ()


SITUATIONS: tuple[Situation, ...] = (
    Situation(
        "simple-baseline",
        "You want a simple baseline with no parameters",
        ("simple",),
        ("sinusoidal", "nope"),
        "Sinusoidal adds fixed sin/cos waves of geometric wavelengths to the embeddings: "
        "nothing to train, bounded in [-1, 1], defined at any position (Vaswani et al. 2017). "
        "NoPE is simpler still, for a causal decoder only: order then comes from the causal "
        "mask alone (Haviv et al. 2022; Kazemnejad et al. 2023); without the mask the model "
        "cannot tell positions apart.",
        ("extrapolation", "nope-needs-causality"),
    ),
    Situation(
        "fixed-length",
        "Your sequence length is fixed and you want the best fit on one dataset",
        ("fixed-length",),
        ("learned",),
        "A trainable vector per position (BERT, GPT-2) fits whatever the data rewards, but "
        "its table is a hard limit: trained with 2,048 rows, a model cannot read token 2,049, "
        "and a longer context means retraining (Devlin et al. 2019; Radford et al. 2019).",
        ("extrapolation",),
    ),
    Situation(
        "longer-than-trained",
        "You need to handle sequences longer than those trained on",
        ("extrapolation",),
        ("alibi", "kerple", "fire", "fox", "cope", "stick_breaking", "path", "rope"),
        "The article calls RoPE the best choice here; measured, it is not for reading longer "
        "inputs as they are: plain RoPE's perplexity grows past the training length while "
        "ALiBi's and KERPLE's stay flat (Press et al. 2022; Chi et al. 2022; FIRE: Li et al. "
        "2023; posenc's arena measures it: see the evidence of a run). Two newer biases "
        "learn their decay from the content: FoX's forget gates (Lin et al. 2025) and CoPE's "
        "counted positions (Golovneva et al. 2024) also stay flat in the arena, FoX below "
        "ALiBi at every length (docs/results/research). Stick-breaking attention replaces "
        "the softmax by a stick each key breaks from the nearest one back, recency with no "
        "positions at all, and is reported to extrapolate (Tan et al. 2025); PaTH turns "
        "q and k by Householder-like transforms of the tokens between them, learned from "
        "the content (Yang et al. 2025). So: a bias "
        "encoding for zero-shot extrapolation; RoPE when you can extend it with a scaling "
        "(posenc.create('rope', scaling=...): YaRN, NTK) and a short fine-tune at the new "
        "length (Chen et al. 2023; Peng et al. 2023).",
        ("extrapolation", "context-extension", "length-generalization"),
    ),
    Situation(
        "distance-grammar",
        "The grammar depends on the distance between tokens, not their absolute position",
        ("distance-grammar",),
        ("rope", "t5", "shaw"),
        "Relative encodings see only the offset j - i, so a phrase reads the same wherever it "
        "sits: learned vectors per clipped distance (Shaw et al. 2018), a learned bias per "
        "log-spaced distance bucket (T5, Raffel et al. 2020); RoPE gets it from rotations, "
        "q'·k' depends on n - m only (Su et al. 2021).",
        ("extrapolation",),
    ),
    Situation(
        "general-llm",
        "You are building a modern general-purpose LLM",
        ("general-llm",),
        ("rope",),
        "RoPE is what Llama, Qwen, Mistral and DeepSeek use: relative positions with no extra "
        "tensor, cached keys like any others, fused attention kernels (Su et al. 2021). "
        "Plan the context: plain RoPE does not extrapolate, a scaling (YaRN, NTK, Llama 3; "
        "posenc.create('rope', scaling=...)) plus a short fine-tune extends it (Peng et al. "
        "2023); long prompts still lose facts in the middle (Liu et al. 2023).",
        ("extrapolation", "context-extension", "lost-in-the-middle"),
    ),
    Situation(
        "extrapolation-simple",
        "Length extrapolation comes first and you want the simplest implementation",
        ("extrapolation", "simple"),
        ("alibi",),
        "ALiBi leaves the embeddings alone and subtracts a fixed per-head penalty "
        "proportional to the distance from the scores: no parameters, and trained on 1,024 "
        "tokens it reads 2,048 (Press et al. 2022).",
        ("extrapolation", "length-generalization"),
    ),
    Situation(
        "relative-low-memory",
        "You want the benefits of relative positions without the memory and cache cost",
        ("low-memory",),
        ("rope", "xpos"),
        "Relative encodings with a learned term per query-key pair (Shaw et al.'s vectors, "
        "T5's buckets) work on every layer's [L, L] score matrix: more memory, and no fused "
        "kernel that never forms it. RoPE rotates q and k once per token, O(L·d), and the "
        "KV cache holds rotated keys like any others (Su et al. 2021); xPos adds a decay "
        "with distance at the same cost (Sun et al. 2022).",
        ("extrapolation",),
    ),
    Situation(
        "images",
        "Images: patches on a 2-D grid (vision transformers)",
        ("vision",),
        ("rope_2d", "rope_mixed", "sincos_2d", "learned_2d"),
        "A 1-D index loses which patches are vertical neighbours. Axial 2-D RoPE turns half "
        "the pairs with the column and half with the row, so scores depend on the offset "
        "(dy, dx) and other resolutions work; RoPE-Mixed learns frequencies along any "
        "direction (Heo et al. 2024). Fixed 2-D sin/cos (MAE, He et al. 2021) and a learned "
        "vector per patch (ViT, Dosovitskiy et al. 2020) are the additive baselines; the "
        "learned table is tied to one grid size.",
    ),
    Situation(
        "video-text",
        "Video or images interleaved with text (multimodal)",
        ("video",),
        ("mrope",),
        "M-RoPE gives every token (temporal, height, width) ids and splits the rotary pairs "
        "among them; text tokens get equal ids, so text is plain RoPE and a language model's "
        "RoPE carries over (Qwen2-VL, Wang et al. 2024).",
    ),
    Situation(
        "time-series",
        "Time series: real timestamps, uneven steps, seasonality",
        ("time-series",),
        ("timestamp", "time2vec", "calendar"),
        "Token indices assume even steps. timestamp puts sin/cos of the real time between a "
        "minimum and a maximum period (nothing to train); Time2Vec learns the frequencies "
        "and phases of periodic features plus a linear trend (Kazemi et al. 2019); calendar "
        "adds month, day, weekday and hour embeddings of a Unix time for seasonality "
        "(Informer, Zhou et al. 2021).",
    ),
)

"""Where the queries and keys of one attention call sit: checked once, read by every layer.

The one rule for positions nobody gave: the queries are the last ``q_len`` of the
``k_len`` keys (:func:`query_offset`), the layout of a KV cache while decoding, and the
layout of plain self-attention when the lengths agree. :func:`posenc.attention`, rotary
encodings and :class:`~posenc.models.TransformerLM` all take their defaults from it.

:class:`AttnPositions` holds the positions that order queries and keys (the causal mask
compares them, the KV cache stores them), checked and defaulted, with whether the caller
gave them. A model builds it once per forward and hands it to every layer, so that the
checks and the values read from the positions (their range, whether they are in index
order: one device sync each) happen once, not once per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..arguments import check_size, check_str
from ..host_reads import read, read_now, reads_values
from .checks import check_batch, check_positions

__all__ = ["AttnPositions", "query_offset"]


def query_offset(q_len: int, k_len: int, given: str = "q_positions and k_positions") -> int:
    """The position of the first query when none are given: ``k_len - q_len`` (the queries
    are the last ``q_len`` keys). More queries than keys have no default place: that
    raises, naming the arguments to pass (``given``)."""
    check_size("q_len", q_len)
    check_size("k_len", k_len)
    check_str("given", given)
    if q_len > k_len:
        raise ValueError(
            f"q has {q_len} positions but k only {k_len} (dimension 2 of q and k, "
            "[batch, heads, seq, head_dim]): a [batch, seq, heads, head_dim] tensor takes "
            f".transpose(1, 2); for queries that are not the last keys, pass {given}"
        )
    return k_len - q_len


@dataclass(frozen=True, eq=False)
class AttnPositions:
    """The positions of the queries and keys of one attention call.

    Attributes:
        q: ``[q_len]``, or ``[batch, q_len]`` expanded to the whole batch.
        k: ``[k_len]``, or ``[batch, k_len]`` expanded to the whole batch.
        explicit: whether the caller gave them; else they are :func:`query_offset`'s
            default, ``arange(k_len - q_len, k_len)`` and ``arange(k_len)``, and backends may
            use their own index-based masks instead of reading them.

    Example:
        >>> p = AttnPositions.build(2, 5, batch=1, device=torch.device("cpu"))
        >>> p.q.tolist(), p.k.tolist(), p.explicit
        ([3, 4], [0, 1, 2, 3, 4], False)
    """

    q: torch.Tensor
    k: torch.Tensor
    explicit: bool
    #: values read from the positions, at most once each (see :meth:`q_range`)
    _read: dict[str, object] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        q_len: int,
        k_len: int,
        batch: int,
        device: torch.device,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> AttnPositions:
        """Check ``q_positions`` and ``k_positions`` (``[len]`` or ``[1 | batch, len]``)
        against the lengths, the batch and the device, or default them; ``k_positions``
        alone is refused (the queries' place among them would be a guess)."""
        check_size("q_len", q_len)
        check_size("k_len", k_len)
        check_size("batch", batch, minimum=1)
        if not isinstance(device, torch.device):
            raise TypeError(f"device must be a torch.device (that of q and k), got {device!r}")
        explicit = q_positions is not None or k_positions is not None
        if q_positions is None:
            if k_positions is not None:
                raise ValueError("k_positions given without q_positions: pass both")
            # arange's defaults, its arguments checked above (a forward builds this once)
            q = torch.arange(query_offset(q_len, k_len), k_len, device=device)  # [q_len]
        else:
            q = check_positions(q_positions, seq_len=q_len, name="q_positions", device=device)
            check_batch(q, batch, "q_positions")
        if k_positions is None:
            k = torch.arange(k_len, device=device)  # [k_len]
        else:
            k = check_positions(k_positions, seq_len=k_len, name="k_positions", device=device)
            check_batch(k, batch, "k_positions")
        # [1, len] stands for every sequence: expanded once, so per-sequence readers (flex's
        # score_mod and mask_mod index positions[b]) see the whole batch
        q = q.expand(batch, -1) if q.dim() == 2 else q
        k = k.expand(batch, -1) if k.dim() == 2 else k
        record = cls(q, k, explicit)
        # every fact in one read (of the forward's), where the CPU kernels that choose by
        # them run; elsewhere nothing asks for them
        if explicit and q.device.type == "cpu" and reads_values(q, k):
            read(record._facts(), record._store)
        return record

    @property
    def q_len(self) -> int:
        return self.q.shape[-1]

    @property
    def k_len(self) -> int:
        return self.k.shape[-1]

    def q_range(self) -> tuple[float, float]:
        """``(min, max)`` of the query positions (default positions: no read)."""
        if not self.explicit:
            start = self.k_len - self.q_len
            return float(start), float(self.k_len - 1)
        return self._fact("q_range")

    def index_ordered(self) -> bool:
        """Whether ``k_position <= q_position`` is ``k_index <= q_index``: the same positions
        for queries and keys, strictly increasing."""
        if not self.explicit:
            return self.q_len == self.k_len
        return self._fact("index_ordered")

    def keys_first(self) -> bool:
        """Whether every key sits at or before every query (decoding after a prompt)."""
        if not self.explicit:
            return self.q_len == 1
        return self._fact("keys_first")

    def shift(self) -> int | None:
        """``c`` when the positions are consecutive, ``[len]`` each (``p = offset +
        index``), so that a pair's distance is ``j - i + c``; else None."""
        if not self.explicit:
            return self.q_len - self.k_len
        return self._fact("shift")

    def _facts(self) -> torch.Tensor:
        """What the backends choose by, as ``[8]`` float64 (:meth:`_store` names them):
        the ranges of q and k, whether they are the same increasing positions, and
        whether each is ``[len]`` and consecutive, with their first positions."""
        q, k = self.q.to(torch.float64), self.k.to(torch.float64)

        def steps(p: torch.Tensor, rule) -> torch.Tensor:
            d = p.diff(dim=-1)
            return rule(d).all() if d.numel() else torch.ones((), dtype=torch.bool)

        true = torch.ones((), dtype=torch.bool, device=q.device)
        false = torch.zeros((), dtype=torch.bool, device=q.device)
        same = (q == k).all() if q.shape == k.shape else false
        flat = q.dim() == 1 and k.dim() == 1
        facts = [
            *torch.aminmax(q),
            *torch.aminmax(k),
            same & steps(q, lambda d: d > 0),
            (steps(q, lambda d: d == 1) & steps(k, lambda d: d == 1)) if flat else false,
            k[..., 0].amin() if flat else true,
            q[..., 0].amin() if flat else true,
        ]
        return torch.stack([f.to(torch.float64) for f in facts])

    def _store(self, values: list[float]) -> None:
        self._read.update(_named(values))

    def _fact(self, key: str):  # read with every other fact, once (not under compile)
        if torch.compiler.is_compiling():  # a graph break: nothing is kept between traces
            return _named(self._facts().tolist())[key]
        if key not in self._read:
            read_now(self._facts(), self._store)
        return self._read[key]


def _named(values: list[float]) -> dict[str, object]:
    """The facts of :meth:`AttnPositions._facts`, by name."""
    q_low, q_high, _k_low, k_high, ordered, consecutive, k_first, q_first = values
    return {
        "q_range": (q_low, q_high),
        "index_ordered": bool(ordered),
        "keys_first": k_high <= q_low,
        "shift": int(k_first - q_first) if consecutive else None,
    }

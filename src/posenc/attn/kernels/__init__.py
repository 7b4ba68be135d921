"""Kernels that runners share and no plan names.

- :mod:`~posenc.attn.kernels.flash_blocks`: the CPU flash kernel a block of queries at a
  time, its forward with the log-sum-exp and the FlashAttention-2 backward (``distance``,
  ``rows``, ``flash`` and ``shaw`` run on it);
- :mod:`~posenc.attn.kernels.shaw_bins`: Shaw's distance bins and the band masks of a
  block (``shaw``).
"""

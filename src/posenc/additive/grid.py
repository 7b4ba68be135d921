"""Additive encodings of image patch grids: ``sincos_2d`` (MAE) and ``learned_2d`` (ViT)."""

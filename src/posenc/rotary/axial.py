"""Rotary encodings of image patch grids: ``rope_2d`` (axial) and ``rope_mixed``."""

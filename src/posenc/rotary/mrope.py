"""Multimodal RoPE (M-RoPE, Qwen2-VL): temporal, height and width sections of the pairs."""

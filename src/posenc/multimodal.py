"""Position ids of text mixed with images and videos, for M-RoPE (Qwen2-VL)."""

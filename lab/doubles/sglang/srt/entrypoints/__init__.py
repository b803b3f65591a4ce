"""LAB DOUBLE of sglang.srt.entrypoints (not SGLang): see sglang/__init__.py."""

"""LAB DOUBLE of sglang.srt (not SGLang): see sglang/__init__.py."""

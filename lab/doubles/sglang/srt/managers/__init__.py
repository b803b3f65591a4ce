"""LAB DOUBLE of sglang.srt.managers (not SGLang): see sglang/__init__.py."""

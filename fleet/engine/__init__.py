"""A declared SGLang engine installed in a venv of its own beside the live one, and checked there."""

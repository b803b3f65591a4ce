"""Host answers as the facts' commands frame them (fleet/core/wire.py), for parser tests."""

from __future__ import annotations

import base64


def record(key: str, content: str | bytes | None = None, value: str = "") -> str:
    """One record: `@@key[=value]`, then `content` as its base64 line (None: a marker alone)."""
    marker = f"@@{key}" + (f"={value}" if value != "" else "")
    if content is None:
        return marker
    raw = content.encode() if isinstance(content, str) else content
    return f"{marker}\n{base64.b64encode(raw).decode()}"


def answer(*records: str) -> str:
    return "\n".join(records) + "\n"

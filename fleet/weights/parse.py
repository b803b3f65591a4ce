"""What a model directory holds, as the models fact reads it: framed text in, a ModelDir out.

Its config.json's values (the guards check a draft against its target by them) and whether it is there whole
(the hub fetches what is not). A reader of untrusted input, as fleet/rollout/parse.py says.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fleet.core.wire import FIELD_LIMIT, Unreadable, _words, clipped, frames, lines_of, load_json


class ModelStatus(StrEnum):
    """What a model directory came to: the guards refuse all but OK; the hub fetches NOT_FETCHED ones (again)."""

    OK = "ok"
    NO_DIRECTORY = "no directory"
    NO_CONFIG = "no config.json"
    UNREADABLE = "unreadable"
    NO_MANIFEST = "no manifest"
    DAMAGED = "damaged"


NOT_FETCHED = (ModelStatus.NO_DIRECTORY, ModelStatus.NO_MANIFEST, ModelStatus.DAMAGED)  # fetched (again) by the deploy

# config.json keys that count a model's built-in draft (MTP) layers: DeepSeek-V3, GLM,
# MiMo say num_nextn_predict_layers; Qwen3-Next and Qwen3.5/3.6 say mtp_num_hidden_layers.
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


@dataclass(frozen=True)
class ModelDir:
    """A model directory and what its config.json says (text_config's values for multimodal models)."""

    path: str
    status: ModelStatus
    message: str = ""
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    block_size: int | None = None  # top-level: a DFlash draft's trained block size
    dflash_config: dict | None = None
    mtp_layers: int = 0  # built-in draft layers (MTP_KEYS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", ModelStatus(self.status))


def _config_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else None


def parse_config(path: str, text: str | None) -> ModelDir:
    """A model's config.json; multimodal models keep their LM's values under text_config."""
    try:
        config = load_json(text, "config.json")
    except Unreadable as e:
        return ModelDir(path, ModelStatus.UNREADABLE, message=str(e))
    if not isinstance(config, dict):
        return ModelDir(path, ModelStatus.UNREADABLE, message="config.json is not a JSON object")
    inner = config.get("text_config")
    inner = inner if isinstance(inner, dict) else {}

    def get(key: str) -> Any:
        return config[key] if key in config else inner.get(key)

    architectures = config.get("architectures")
    dflash = config.get("dflash_config")
    model_type = config.get("model_type")
    return ModelDir(
        path,
        ModelStatus.OK,
        architectures=tuple(a[:FIELD_LIMIT] for a in architectures if isinstance(a, str))
        if isinstance(architectures, list) else (),
        model_type=model_type[:FIELD_LIMIT] if isinstance(model_type, str) else None,
        vocab_size=_config_int(get("vocab_size")),
        hidden_size=_config_int(get("hidden_size")),
        num_hidden_layers=_config_int(get("num_hidden_layers")),
        block_size=_config_int(config.get("block_size")),
        dflash_config=dflash if isinstance(dflash, dict) else None,
        mtp_layers=max((_config_int(get(k)) or 0 for k in MTP_KEYS), default=0),
    )


def parse_model_dirs(answer: str | list[str]) -> dict[str, ModelDir]:
    """Per `@@path=P`: `@@missing=directory`, `@@missing=config.json`, or `@@config=RC` and its content."""
    models: dict[str, ModelDir] = {}
    path = ""
    for f in frames(answer):
        if f.key == "path":
            path = f.value
        elif f.key == "missing":
            models[path] = ModelDir(path, {"directory": ModelStatus.NO_DIRECTORY, "manifest": ModelStatus.NO_MANIFEST}.get(
                f.value, ModelStatus.NO_CONFIG))
        elif f.key == "damaged":
            models[path] = ModelDir(path, ModelStatus.DAMAGED, message=clipped(
                "size differs from its manifest: " + ", ".join(lines_of(f.text or "")), 300))
        elif f.key == "config" and f.value != "0":
            models[path] = ModelDir(path, ModelStatus.UNREADABLE, message=_words(f.text))  # the reader's own words
        elif f.key == "config":
            models[path] = parse_config(path, f.text)
    return models

"""Secrets: the names that mark one (names_a_secret) and where one is read from (SecretSource)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field, model_validator

from fleet.spec.names import ENV_NAME, ENV_RULE
from fleet.spec.text import PATH_BYTES, SEGMENT_BYTES, Kind, Strict, Text, _absolute

SOURCE_ENV_MAX = 128  # characters of a secret source's variable name
# A word of a variable's name (between its _) no longer than this, one with digits shorter still: SGLANG, MONITORING,
# PRO6000 are words; a pasted key or hex digest in one case is a single long one
ENV_WORD_MAX, ENV_DIGITS_WORD_MAX = 24, 12
ENV_CONVENTION = (f"an UPPER_SNAKE name such as SGLANG_API_KEY: words of letters and digits joined by _, each at most "
                  f"{ENV_WORD_MAX} characters, one with digits at most {ENV_DIGITS_WORD_MAX}; a lowercase name only as "
                  "two or more words of letters, such as https_proxy")

# Words that make a name a secret's (HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, api-key):
# TOKENIZERS_PARALLELISM or max_tokens hold none of them.
SECRET_WORDS = ("TOKEN", "KEY", "KEYS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "APIKEY",
                "APIKEYS", "CREDENTIAL", "CREDENTIALS")
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def names_a_secret(name: str, words: tuple[str, ...] = SECRET_WORDS) -> bool:
    """A word of `name` is one of `words`, whatever the case; words are split at any separator and
    where the case changes (apiKey, HFToken)."""
    return any(w.upper() in words for w in _WORD_BREAK.split(name))


class SecretSource(Strict):
    """Where a secret is read from on the operator's machine when a deploy runs: never the value
    itself (group_data is shown by `pyinfra ... debug-inventory` and kept in git). Exactly one of:"""

    env: str | None = Field(None, description="Name of an environment variable of the deploy's process: "
                            f"{ENV_CONVENTION}; at most {SOURCE_ENV_MAX} characters. A name a password or key "
                            "could be (hunter2, a hex key) is refused, unshown.")
    file: Text | None = Field(None, description="Absolute path (`/...`, or `~/...`: `~` expands) of a file on the "
                              "operator's machine; its content, without the final newline.")

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if (self.env is None) == (self.file is None):
            raise ValueError("exactly one of env (an environment variable's name) or file (a path)")
        # The value is never repeated: one put here by mistake may be the secret itself, and a source is
        # printed by the deploy's refusals (environment variable X is not set, file X cannot be read).
        if self.env is not None and not _env_name(self.env):
            raise ValueError(f"env is not an environment variable name: expected {ENV_RULE}, in one case (a token "
                             f"mixes them), at most {SOURCE_ENV_MAX} characters (not shown: it may be the secret "
                             "itself)")
        if self.env is not None and looks_like_a_secret(self.env):
            raise ValueError("env: the value given looks like a secret itself, not the name of an environment "
                             f"variable: not shown (expected {ENV_CONVENTION})")
        if self.file is not None and not self.file.strip():
            raise ValueError("file is empty")
        if self.file is not None and not _file_path(self.file):
            raise ValueError(f"file is not an absolute file path: expected /... or ~/... in normal form, at most "
                             f"{PATH_BYTES} bytes, {SEGMENT_BYTES} a segment (not shown: it may be the secret itself)")
        return self

    def describe(self) -> str:
        return f"environment variable {self.env}" if self.env is not None else f"file {self.file}"


def _env_name(name: str) -> bool:
    # hf_..., ghp_... tokens are names by ENV_NAME's rule; they mix upper and lower case, variables do not
    return bool(ENV_NAME.match(name)) and len(name) <= SOURCE_ENV_MAX and name in (name.upper(), name.lower())


def looks_like_a_secret(name: str) -> bool:
    """A name of one case that a pasted password or key would also be: lowercase (rare for a variable, the usual
    case of a password, hunter2, or a hex key) unless words of letters, or a word too long for a name's."""
    words = [w for w in name.split("_") if w]
    if name != name.upper() and (len(words) < 2 or not all(w.isalpha() for w in words)):
        return True
    return any(len(w) > (ENV_DIGITS_WORD_MAX if any(c.isdigit() for c in w) else ENV_WORD_MAX) for w in words)


def _file_path(path: str) -> bool:
    # a key is rarely a normal absolute path with segments a file system holds
    try:
        _absolute(path.removeprefix("~"))
    except ValueError:
        return False
    return True


def _a_source_not_a_value(value):
    # A plain string here is most likely the secret itself: refuse it without echoing it.
    if isinstance(value, str):
        raise ValueError("name where the secret comes from, not its value: {'env': 'VARIABLE'} or "
                         "{'file': '~/path'} (group_data is printed by debug-inventory)")
    return value


Source = Annotated[SecretSource, BeforeValidator(_a_source_not_a_value), Kind("secret source")]

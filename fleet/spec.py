"""The declared service of one GPU class: the single source of truth.

group_data/<class>.py holds plain data; these models validate it. The unit file,
the dry-run diff, the preflight guards, `make verify` and the reference in
docs/spec.md all come from here. Every default is documented where it is declared.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import typing
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Literal, Union
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    field_validator,
    model_validator,
)

from fleet import layout

# SGLang 0.5.23's built-in speculative algorithms (its --help lists them); DDTREE is
# not among them: it is upstream PR 29907, provisional, and needs an engine that has it.
SGLANG_0523_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")


@dataclass(frozen=True)
class Kind:
    """How docs/spec.md names a constrained type (fleet/docs.py); pydantic ignores it."""

    name: str


# --- text: every string that reaches argv, a unit, an env file or a shell ----------------------

# Unicode categories refused in any text: control characters (C0, DEL, C1 with U+0085), the line
# and paragraph separators U+2028/U+2029, lone surrogates. systemd, a shell or a log reader takes
# some of them for a line break (a newline in a unit adds a directive) or cannot encode them.
NOT_TEXT = {"Cc": "a control character", "Zl": "a line separator", "Zp": "a paragraph separator",
            "Cs": "a lone surrogate"}
TEXT_MAX = 4096  # characters in any text field: PATH_MAX, and far inside one argument (128 KiB)
NAME_MAX = 256  # characters of service.served_model_name (it is in every smoke request too)
# The smoke prompt travels JSON-escaped (\uXXXX: up to 12 bytes a character) inside one `sh -c`
# argument (128 KiB at most): 4096 characters keep the request body under 49 KiB.
PROMPT_MAX = 4096


def _one_line(value: str) -> str:
    for i, c in enumerate(value):
        what = NOT_TEXT.get(unicodedata.category(c))
        if what:
            raise ValueError(f"expected text without control characters, line separators or lone surrogates; "
                             f"found {what} (U+{ord(c):04X}) at character {i}")
    return value


def text(max_length: int = TEXT_MAX) -> typing.Any:
    """A string type: at most max_length characters, none of NOT_TEXT."""
    return Annotated[str, StringConstraints(max_length=max_length), AfterValidator(_one_line),
                     Kind(f"text (≤ {max_length} chars)")]


Text = text()


PATH_BYTES, SEGMENT_BYTES = 4095, 255  # Linux's PATH_MAX (with its final NUL) and NAME_MAX


def _absolute(path: str) -> str:
    # The normal form systemd wants of an ExecStart= command (path_is_normalized), and one spelling
    # of each path for preflight's comparisons with what runs.
    segments = path.split("/")[1:]
    if not path.startswith("/") or any(s in ("", ".", "..") for s in segments):
        raise ValueError("an absolute path in normal form: starting with /, no empty, '.' or '..' segment "
                         "(no //, no trailing /)")
    if len(path.encode()) > PATH_BYTES or any(len(s.encode()) > SEGMENT_BYTES for s in segments):
        raise ValueError(f"a path Linux can hold: at most {PATH_BYTES} bytes, {SEGMENT_BYTES} a segment")
    return path


AbsPath = Annotated[Text, AfterValidator(_absolute), Kind("absolute path")]

NOT_IN_COMMAND = "\\\"'$"


def _command(path: str) -> str:
    # The path of ExecStart='s command: systemd refuses quotes and backslashes there (string_is_safe)
    # and expands no $ in it, where the quoting of an argument would double it.
    found = sorted(set(path) & set(NOT_IN_COMMAND))
    if found:
        raise ValueError(f"a path ExecStart= runs: none of {' '.join(NOT_IN_COMMAND)}; found {' '.join(found)}")
    return path


CommandPath = Annotated[AbsPath, AfterValidator(_command), Kind("absolute path, none of \\ \" ' $")]

# --- names: hosts, units, environment variables ----------------------------------------------

# \Z, not $: $ also matches before a final newline ("gpu-1\n" would pass)
HOST_NAME = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")
# Names that resolve to the host itself (RFC 6761 reserves *.localhost; Debian's /etc/hosts adds the ip6- ones).
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def _host(v: str) -> str:
    # It lands in URLs and shell commands on the host: an address or a name, nothing else. A zone
    # (fe80::1%eth0) is refused: Python's parser takes any text after the %.
    try:
        ipaddress.ip_address(v)
    except ValueError:
        if not HOST_NAME.match(v):
            raise ValueError("an IP address (e.g. 0.0.0.0, 127.0.0.1, ::) or a host name") from None
    if "%" in v:
        raise ValueError("an IP address without a zone (%...) or a host name")
    return v


HostAddress = Annotated[str, AfterValidator(_host), Kind("address or host name")]


def is_loopback(host: str) -> bool:
    """An address or name only the host itself reaches (127.0.0.0/8, ::1, ::ffff:127.x, localhost)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower()
        return name in LOCAL_NAMES or name.endswith(".localhost")
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


# systemd's unit_name_is_valid(): ASCII letters, digits and :-_.\ before the type suffix, '@'
# only between a template's prefix and its instance; at most 255 characters with the suffix.
# A leading '-' would be read as an option by systemctl (`-H host` connects elsewhere), and the
# name is a path component (/var/lib/sglang-fleet/<unit>/): no leading '.', no '.' or '..'.
UNIT_NAME = re.compile(r"^(?![.-])[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\@-]+)?\Z")
UNIT_NAME_MAX = 255
UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice",
              "scope")
UNIT_RULE = "ASCII letters, digits and : - _ . \\ only, not starting with - or ."
# The deploy names files after a service's unit (fleet/layout.py): the longest, staged, must fit in
# Linux's 255 bytes of a file name, or every rollout fails at its first upload (ASCII: a byte a character).
SERVICE_UNIT_MAX = SEGMENT_BYTES - max(len(n) for n in layout.staged_names(""))


def _unit_prefix(prefix: str, instance: bool) -> None:
    if len(prefix) + len(".service") > UNIT_NAME_MAX:
        raise ValueError(f"a systemd unit name of at most {UNIT_NAME_MAX} characters with .service; "
                         f"found {len(prefix) + len('.service')}")
    if not UNIT_NAME.match(prefix) or (not instance and "@" in prefix):
        where = "'@' only as in name@instance" if instance else "no '@'"
        raise ValueError(f"a systemd unit name: {UNIT_RULE}, {where}")


def _service_unit(v: str) -> str:
    if v.endswith(".service"):
        raise ValueError("a systemd unit name without '.service' (it is added)")
    if len(v) > SERVICE_UNIT_MAX:
        longest = max(layout.staged_names("U"), key=len)
        raise ValueError(f"a systemd unit name of at most {SERVICE_UNIT_MAX} characters: the deploy names files after "
                         f"it, the longest {longest}, each within {SEGMENT_BYTES} bytes; found {len(v)}")
    _unit_prefix(v, instance=False)
    return v


def _workload_unit(v: str) -> str:
    # systemctl reads a name without a unit type as NAME.service, and so do we
    _, dot, suffix = v.rpartition(".")
    if dot and suffix in UNIT_TYPES and suffix != "service":
        raise ValueError(f"a .service unit; found a .{suffix}: a name here is a service's (a scope is a table "
                         "with name, scope and give_back)")
    full = v if dot and suffix == "service" else f"{v}.service"
    _unit_prefix(full.removesuffix(".service"), instance=True)
    return full


ServiceUnit = Annotated[str, AfterValidator(_service_unit), Kind("unit name")]
WorkloadUnit = Annotated[str, AfterValidator(_workload_unit), Kind("unit name")]


def glob_matches(pattern: str, text: str) -> bool:
    """`text` matches `pattern` whole, where `*` is any characters (none too) and `?` one, every
    other character itself. Backtracks to the last `*` only: O(len(pattern) * len(text)) at worst,
    whatever a host's text is (a regex of many `.*` is not)."""
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] != "*" and pattern[p] in ("?", text[t]):
            p, t = p + 1, t + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, t, p + 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    return pattern[p:].strip("*") == ""

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_RULE = "letters, digits and _, not starting with a digit"
SOURCE_ENV_MAX = 128  # characters of a secret source's variable name

# Words that make a name a secret's (HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, api-key):
# TOKENIZERS_PARALLELISM or max_tokens hold none of them.
SECRET_WORDS = ("TOKEN", "KEY", "KEYS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "APIKEY",
                "APIKEYS", "CREDENTIAL", "CREDENTIALS")
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def names_a_secret(name: str, words: tuple[str, ...] = SECRET_WORDS) -> bool:
    """A word of `name` is one of `words`, whatever the case; words are split at any separator and
    where the case changes (apiKey, HFToken)."""
    return any(w.upper() in words for w in _WORD_BREAK.split(name))


class Strict(BaseModel):
    # Typos must not pass silently: every unknown key is an error. inf and nan are no durations.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# A number or flag as written: pydantic's lax mode would take "30000" or True for a port and 1 or "no" for
# a flag, silently. A whole number is a Number still (a timeout of 120).
Int = Annotated[int, Field(strict=True)]
Number = Annotated[float, Field(strict=True)]
Bool = Annotated[bool, Field(strict=True)]


class GpuClass(Strict):
    """What a host of this class must have, as nvidia-smi reports it."""

    accepted_models: list[Text] = Field(
        min_length=1,
        description="Exact nvidia-smi `name` values this class accepts. No substring match: "
        "'NVIDIA RTX 6000 Ada Generation' is not an RTX PRO 6000.",
    )
    gpu_count: Int = Field(ge=1, le=16, description="GPUs the host must have (at least), 1..16.")
    min_memory_mib: Int = Field(ge=1, le=4_194_304,
                                description="Memory each GPU must have, in MiB (memory.total), 1..4194304 (4 TiB).")
    mig: Bool = Field(
        False,
        description="True if the class runs on MIG-partitioned GPUs. A host whose GPUs' MIG mode differs "
        "is refused: with MIG on, SGLang sees slices (or nothing), not whole GPUs.",
    )
    shared: Bool = Field(
        False,
        description="True if other GPU processes may run beside the service; "
        "False refuses a host whose GPUs are held by anything undeclared.",
    )

    @field_validator("accepted_models")
    @classmethod
    def _no_blank_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if name != name.strip() or not name:
                raise ValueError(f"model name {name!r} must be an exact nvidia-smi name (no padding)")
        return names


class SecretSource(Strict):
    """Where a secret is read from on the operator's machine when a deploy runs: never the value
    itself (group_data is shown by `pyinfra ... debug-inventory` and kept in git). Exactly one of:"""

    env: str | None = Field(None, description="Name of an environment variable of the deploy's process: "
                            f"{ENV_RULE}, in one case, at most {SOURCE_ENV_MAX} characters.")
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

# --- extra_args: SGLang flags the spec does not own -------------------------------------------

# The server arguments the spec sets, each SGLang 0.5.23 option string (aliases too) -> the field
# that sets it. SGLang's parser keeps the last value given: one of these in extra_args would run a
# model, tp or draft preflight never checked. tests/unit/test_spec.py checks the table against the
# real parser's (lab/doubles/sglang/flags.json); fleet/render.py writes no other flag.
SPEC_FLAGS = {
    "--model-path": "service.model_path",
    "--model": "service.model_path",
    "--served-model-name": "service.served_model_name",
    "--host": "service.host",
    "--port": "service.port",
    "--tp-size": "service.tp_size",
    "--tensor-parallel-size": "service.tp_size",
    "--mem-fraction-static": "service.mem_fraction",
    "--context-length": "service.context_length",
    "--trust-remote-code": "service.trust_remote_code",
    "--enable-metrics": "service.enable_metrics",
    "--speculative-algorithm": "speculative.algorithm",
    "--speculative-draft-model-path": "speculative.draft_model_path",
    "--speculative-draft-model": "speculative.draft_model_path",
    "--speculative-num-steps": "speculative.num_steps",
    "--speculative-eagle-topk": "speculative.topk",
    "--speculative-num-draft-tokens": "speculative.num_draft_tokens",
    "--speculative-ngram-max-bfs-breadth": "speculative.max_bfs_breadth",
    "--speculative-dflash-block-size": "speculative.block_size",
    "--speculative-ddtree-budget": "speculative.tree_budget",  # provisional (PR 29907): not in 0.5.23
}
# SGLang flags whose value is a secret: the process's arguments are readable by every local user,
# so they never go on the command line (they go to the 0600 --config file).
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")
SECRET_FLAG_FIELDS = {"--api-key": "service.api_key", "--admin-api-key": "service.admin_api_key"}
# --config is ours (one per server, SGLang refuses a second).
CONFIG_FLAG = "--config"
# These take inline JSON that may carry a key (watermark) or storage credentials (hicache): a file
# path is fine, `{...}` is not.
INLINE_SECRET_FLAGS = ("--watermark-config", "--hicache-storage-backend-extra-config")
# SGLang 0.5.23 flags that are prefixes of a flag above: exact names, not abbreviations of it.
NOT_ABBREVIATIONS = ("--ssl-keyfile", "--hicache-storage-backend")


# A flag named so holds a secret (--hf-api-key, --aws-secret): not TOKEN, which SGLang's flags use
# for the model's tokens (--speculative-token-map).
SECRET_FLAG_WORDS = tuple(w for w in SECRET_WORDS if w != "TOKEN")


def _flag_of(token: str) -> str:
    # SGLang's flags are all lower case: --API-KEY is a mistake for --api-key, its value a key all the same
    return token.split("=", 1)[0].replace("_", "-").lower()


def read_as(token: str, flags: typing.Iterable[str]) -> list[str]:
    """The flags of `flags` SGLang's parser may read `token` as: exactly, with `=value`, in the `_`
    spelling, or abbreviated (argparse's allow_abbrev: a prefix of one flag means that flag; of
    several, an error at start, refused here all the same)."""
    name = _flag_of(token)
    if not name.startswith("--") or name == "--":  # "--" ends the options: no flag follows
        return []
    flags = list(flags)
    if name in flags:
        return [name]
    if name in NOT_ABBREVIATIONS:
        return []
    return [f for f in flags if f.startswith(name)]


def _flag_takes_a_secret(token: str) -> bool:
    # For what a message shows, broader than what is refused: --speculative-token-map's path is masked too
    return bool(read_as(token, SECRET_FLAGS + INLINE_SECRET_FLAGS)) or (
        token.startswith("--") and names_a_secret(_flag_of(token)))


def masked_args(args: typing.Sequence) -> list:
    """args as a message may show them: the value after (or `=` of) a flag that takes a secret is ***."""
    out = list(args)
    for i, a in enumerate(args):
        if not isinstance(a, str) or not _flag_takes_a_secret(a):
            continue
        if "=" in a:
            out[i] = a.split("=", 1)[0] + "=***"
        elif i + 1 < len(args):
            out[i + 1] = "***"
    return out


def _read(flag: str, flags: list[str]) -> str:
    """How a refusal names what the parser would read `flag` as."""
    return flag if flags == [flag] else f"{flag} (read as {', '.join(flags)})"


def _extra_arg_problem(args: list, i: int) -> str | None:
    a = args[i]
    flag = a.split("=", 1)[0]
    secret = read_as(a, SECRET_FLAGS)
    if secret:
        fields = [SECRET_FLAG_FIELDS[s] for s in secret if s in SECRET_FLAG_FIELDS]
        where = f"declare it in {' or '.join(fields)}" if fields else "sglang-fleet has no field for it yet"
        return (f"{_read(flag, secret)} would put a secret in the server's arguments, readable by every local "
                f"user: {where}")
    if flag.startswith("--") and names_a_secret(flag, SECRET_FLAG_WORDS):
        return (f"{flag} names a secret: its value would be in the server's arguments, readable by every local "
                "user; keys go in service.api_key or service.admin_api_key, other secrets in "
                "service.secret_environment")
    if read_as(a, [CONFIG_FLAG]):
        return (f"{flag}: the server's --config is sglang-fleet's 0600 file for its secrets (declared in "
                "service.api_key, service.admin_api_key)")
    owned = read_as(a, SPEC_FLAGS)
    fields = sorted({SPEC_FLAGS[f] for f in owned})
    if len(fields) == 1:
        return (f"{_read(flag, owned)} is {fields[0]}: set it there (SGLang keeps the last value given: in "
                "extra_args it would replace the one preflight checked)")
    if fields:
        return (f"{flag} abbreviates flags the spec sets ({', '.join(owned)}): spell out the flag meant; "
                f"those belong in {', '.join(fields)}")
    inline = read_as(a, INLINE_SECRET_FLAGS)
    value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
    if inline and isinstance(value, str) and value.lstrip().startswith("{"):
        return (f"{', '.join(inline)} with inline JSON may carry a secret into the server's arguments: give "
                "the path of a file on the host instead")
    return None


_TEXT = TypeAdapter(Text)


def _extra_args(args):
    # Before the elements' own checks: a refusal here shows the whole list with its secrets masked
    # (masked_args), where an element's own error would show that element, secret or not.
    if isinstance(args, (list, tuple)):
        args = list(args)
        for i, a in enumerate(args):
            problem = _extra_arg_problem(args, i) if isinstance(a, str) else None
            after = args[i - 1] if i else None
            secret_value = (isinstance(a, str) and "=" in a and _flag_takes_a_secret(a)) or (
                isinstance(after, str) and "=" not in after and _flag_takes_a_secret(after))
            if problem is None and secret_value:
                try:
                    _TEXT.validate_python(a)
                except ValidationError as e:
                    msg = e.errors()[0]["msg"].removeprefix("Value error, ")
                    problem = f"element {i} (a secret's value, not shown): {msg}"
            if problem:
                raise ValueError(problem)
    return args


# --- weights: models by Hugging Face repository and commit (fetched by tasks/hub.py) ---------------

# huggingface_hub's rules for a repo id (validate_repo_id), with the organisation required: it is a
# directory of the revision's path
REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?\Z")
COMMIT = re.compile(r"[0-9a-f]{40}\Z")
BRANCH = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]{0,254}\Z")


def _repo_id(v: str) -> str:
    parts = v.split("/")
    if len(parts) != 2 or not all(REPO_PART.match(p) for p in parts) or ".." in v or "--" in v or v.endswith(".git"):
        raise ValueError("a Hugging Face model repository as ORG/NAME (letters, digits, . _ -; each part starting and "
                         "ending with a letter or digit, at most 96 characters; no '..', '--' or final .git), e.g. "
                         "'z-lab/Qwen3.6-27B-DFlash'")
    return v


def _commit(v: str) -> str:
    if not COMMIT.match(v):
        raise ValueError("a commit: its 40 lowercase hexadecimal digits (a branch or tag moves: two hosts would "
                         "serve different weights; the repository's history page lists them)")
    return v


def _branch(v: str) -> str:
    if not BRANCH.match(v) or ".." in v or "//" in v or v.endswith(("/", ".lock")):
        raise ValueError("a branch name as git allows it (letters, digits, . _ / -; not starting with - or /, no "
                         "'..' or '//', not ending in / or .lock), e.g. 'main'")
    return v


class HubModel(Strict):
    """A model by its Hugging Face repository at one commit: fetched by the deploy (tasks/hub.py) from
    hub.endpoint into hub.models_dir/ORG/NAME/REVISION, checked, and served from there."""

    repo: Annotated[Text, AfterValidator(_repo_id)] = Field(description="The repository, ORG/NAME "
                                                            "(`z-lab/Qwen3.6-27B-DFlash`).")
    revision: Annotated[Text, AfterValidator(_commit)] | None = Field(
        None, description="The commit, its 40 hex digits. Required, unless `branch` is declared.")
    branch: Annotated[Text, AfterValidator(_branch)] | None = Field(
        None, description="Declared as a branch instead (`main`): resolved to its commit once per run, on the "
        "controller, so every host of the run gets the same commit, which the summary and the record then name. "
        "With `revision` too, that commit is served and the branch only named.")

    @model_validator(mode="after")
    def _a_commit_or_a_branch(self) -> HubModel:
        if self.revision is None and self.branch is None:
            raise ValueError("revision (a commit, its 40 hex digits) or, declared as such, branch (resolved to its "
                             "commit at each run)")
        return self

    def describe(self) -> str:
        if self.revision is None:
            return f"{self.repo}@{self.branch}"
        return f"{self.repo}@{self.revision[:12]}" + (f" (branch {self.branch})" if self.branch else "")


DRAFT_MODEL = ("Draft model by Hugging Face repository and commit (`{'repo': ..., 'revision': ...}`), fetched as "
               "service.model is; its revision directory is then draft_model_path.")


def _one_of(path: str | None, model: HubModel | None, path_name: str, model_name: str) -> None:
    if (path is None) == (model is None):
        raise ValueError(f"exactly one of {path_name} (a directory on the host, for weights placed by hand) and "
                         f"{model_name} (a Hugging Face repository and commit the deploy fetches)")


DEFAULT_LAUNCHER = "/opt/sglang/bin/python"  # where a hand-made SGLang environment usually is


class Service(Strict):
    """The SGLang server: one systemd unit per host."""

    unit: ServiceUnit = Field("sglang", description="systemd unit name, without `.service`: " + UNIT_RULE
                              + f", no '@', at most {SERVICE_UNIT_MAX} characters (the deploy's file names made "
                              f"from it fit in {SEGMENT_BYTES} bytes).")
    launcher: CommandPath | None = Field(
        None,
        description=f"Interpreter of a hand-made SGLang environment; runs `-m sglang.launch_server`. Unset: "
        f"{DEFAULT_LAUNCHER}, or the venv of the declared `engine` (the two are exclusive).",
    )
    model_path: AbsPath | None = Field(None, description="Target model directory on the host, for weights placed "
                                       "by hand. Exactly one of model_path and model.")
    model: HubModel | None = Field(None, description="Target model by Hugging Face repository and commit, fetched "
                                   "by the deploy into its revision directory (hub.models_dir/ORG/NAME/REVISION), "
                                   "which then is model_path.")
    served_model_name: text(NAME_MAX) = Field(
        description=f"Name clients use in the OpenAI API (`model`); not starting with `-`, at most {NAME_MAX} "
        "characters.")
    host: HostAddress = Field("127.0.0.1", description="Bind address (SGLang's default is 127.0.0.1). A class "
                              "behind a gateway binds one the gateway host reaches (not loopback).")
    port: Int = Field(30000, ge=1, le=65535, description="HTTP port (SGLang's default is 30000), 1..65535.")
    tp_size: Int = Field(1, ge=1, le=16, description="Tensor parallel size, 1..16; must divide the class's GPU count.")
    mem_fraction: Number = Field(
        0.85, ge=0.1, le=0.99,
        description="--mem-fraction-static: share of GPU memory for weights and KV cache, 0.1..0.99.",
    )
    context_length: Int | None = Field(None, ge=1, le=16_777_216,
                                       description="--context-length, 1..16777216; unset = the model's own.")
    trust_remote_code: Bool = Field(False, description="--trust-remote-code.")
    enable_metrics: Bool = Field(True, description="--enable-metrics (Prometheus /metrics).")
    extra_args: Annotated[list[Text], BeforeValidator(_extra_args)] = Field(
        default_factory=list,
        description="Further SGLang flags, verbatim, appended to ExecStart. None of the flags the spec sets "
        "(--model-path, --tp-size, --speculative-algorithm, --speculative-draft-model-path ..., in any "
        "spelling SGLang's parser takes, abbreviations too: the refusal names the field; other "
        "--speculative-* tuning flags are fine), no secret flag (--api-key, --admin-api-key, "
        "--ssl-keyfile-password), no --config, no inline JSON for --watermark-config or "
        "--hicache-storage-backend-extra-config.",
    )
    environment: dict[str, Text] = Field(
        default_factory=dict,
        description="Environment of the unit (written to its 0644 environment file). A variable whose name "
        "marks a secret (a `_`-separated word TOKEN, KEY, SECRET, PASSWORD, PASSWD, APIKEY, CREDENTIAL(S)) "
        "belongs in secret_environment.",
    )
    api_key: Source | None = Field(
        None,
        description="Where the API key for /v1/* comes from, e.g. `{\"env\": \"SGLANG_API_KEY_PRO6000\"}`: read when "
        "a deploy runs, for the classes it deploys. It reaches SGLang through a 0600 YAML file "
        "(`--config`), never the command line; requests made on the host read it from a 0600 header file.",
    )
    admin_api_key: Source | None = Field(
        None,
        description="Where SGLang's admin API key (--admin-api-key, for management endpoints) comes "
        "from; kept like api_key.",
    )
    secret_environment: dict[str, Source] = Field(
        default_factory=dict,
        description="Secret environment variables of the unit (e.g. HF_TOKEN), each naming where its value "
        "comes from. Written to a 0600 environment file, never to the 0644 one or a diff.",
    )
    drain_timeout_s: Number = Field(
        120,
        ge=1,
        le=3600,
        description="How long a stop lets in-flight requests finish, 1..3600 s: SGLang drains on SIGTERM "
        "(the unit sends it to the server only, KillMode=mixed); systemd kills what is left after "
        "this (TimeoutStopSec).",
    )
    restarts_on_crash: Int = Field(
        2,
        ge=0,
        le=10,
        description="How often systemd restarts a crashed server before it gives up and leaves the "
        "unit failed, 0..10 (StartLimitBurst = this + 1, within a window of that many load timeouts), "
        "instead of reloading the model forever.",
    )

    @field_validator("served_model_name")
    @classmethod
    def _name(cls, v: str) -> str:
        # SGLang's parser would read a leading '-' as a flag, not as --served-model-name's value
        if not v or v.startswith("-"):
            raise ValueError("a non-empty name not starting with '-'")
        return v

    @field_validator("environment")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name: expected {ENV_RULE}")
            if names_a_secret(name):
                raise ValueError(f"{name} names a secret (its value is not shown): declare where it comes from "
                                 f"in service.secret_environment, e.g. {{'{name}': {{'env': '{name}'}}}}; "
                                 "environment is written to a file every local user can read")
        return env

    @field_validator("secret_environment")
    @classmethod
    def _secret_env_names(cls, env: dict[str, SecretSource]) -> dict[str, SecretSource]:
        for name in env:
            if not ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name: expected {ENV_RULE}")
        return env

    @model_validator(mode="after")
    def _one_model(self) -> Service:
        _one_of(self.model_path, self.model, "model_path", "model")
        return self

    @model_validator(mode="after")
    def _secret_env_apart(self) -> Service:
        both = sorted(set(self.environment) & set(self.secret_environment))
        if both:
            raise ValueError(f"{', '.join(both)} in both environment and secret_environment: one place only")
        return self

    @property
    def server_secrets(self) -> dict[str, SecretSource]:
        """SGLang flag (as its --config YAML key) -> where its secret comes from, for those declared."""
        named = {"api-key": self.api_key, "admin-api-key": self.admin_api_key}
        return {flag: source for flag, source in named.items() if source is not None}


class NoSpeculation(Strict):
    """Plain decoding."""

    algorithm: Literal["none"]


class EagleFamily(Strict):
    """EAGLE, EAGLE3, NEXTN (alias of EAGLE) and STANDALONE draft-model speculation."""

    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]
    draft_model_path: AbsPath | None = Field(
        None,
        description="Draft model directory (or draft_model). Required for EAGLE3 and STANDALONE: without it SGLang "
        "loads the target as its own draft and crashes later (sglang issue 36528). EAGLE/NEXTN "
        "may omit it only if the target has built-in draft (MTP) layers; preflight checks.",
    )
    draft_model: HubModel | None = Field(None, description=DRAFT_MODEL)
    num_steps: Int | None = Field(None, ge=1, le=64, description="--speculative-num-steps, 1..64.")
    topk: Int | None = Field(None, ge=1, le=64, description="--speculative-eagle-topk, 1..64.")
    num_draft_tokens: Int | None = Field(None, ge=1, le=256, description="--speculative-num-draft-tokens, 1..256.")

    @model_validator(mode="after")
    def _sglang_rules(self) -> EagleFamily:
        if self.draft_model_path is not None and self.draft_model is not None:
            _one_of(self.draft_model_path, self.draft_model, "draft_model_path", "draft_model")
        if self.algorithm in ("EAGLE3", "STANDALONE") and not self.draft_model_path and not self.draft_model:
            raise ValueError(
                f"{self.algorithm} needs draft_model_path: without it SGLang loads the target "
                "as its own draft (sglang issue 36528)"
            )
        if self.num_steps is None and (self.topk is not None or self.num_draft_tokens is not None):
            raise ValueError("topk and num_draft_tokens need num_steps (SGLang refuses them alone)")
        if self.num_steps is not None and self.topk is None:
            raise ValueError("num_steps needs topk too (SGLang 0.5.23 crashes at start without it)")
        if self.topk == 1 and self.num_steps is not None and self.num_draft_tokens is not None:
            if self.num_draft_tokens != self.num_steps + 1:
                raise ValueError("with topk 1, num_draft_tokens must be num_steps + 1")
        return self


class Ngram(Strict):
    """N-gram lookup speculation (no draft model)."""

    algorithm: Literal["NGRAM"]
    num_draft_tokens: Int | None = Field(None, ge=1, le=256, description="Draft tokens, 1..256; SGLang's default is 12.")
    max_bfs_breadth: Int | None = Field(
        None, ge=1, le=64, description="--speculative-ngram-max-bfs-breadth: widest level of the n-gram tree, 1..64."
    )


class DFlash(Strict):
    """Linear DFlash (block diffusion draft, z-lab/dflash): SGLang 0.5.23's DFLASH."""

    algorithm: Literal["DFLASH"]
    draft_model_path: AbsPath | None = Field(None, description="DFlash draft directory (SGLang requires a draft): "
                                             "exactly one of draft_model_path and draft_model.")
    draft_model: HubModel | None = Field(None, description=DRAFT_MODEL)
    block_size: Int = Field(16, ge=1, le=16, description="--speculative-dflash-block-size, 1..16.")

    @model_validator(mode="after")
    def _one_draft(self) -> DFlash:
        _one_of(self.draft_model_path, self.draft_model, "draft_model_path", "draft_model")
        return self


class DDTree(Strict):
    """DDTree: DFlash draft tree verified in one target pass. PROVISIONAL: rendered as
    sglang PR 29907 proposes; SGLang 0.5.23 has no DDTree and preflight refuses it there.
    It is never served as linear DFLASH."""

    algorithm: Literal["DDTREE"]
    draft_model_path: AbsPath | None = Field(None, description="DFlash draft directory the tree is built from: "
                                             "exactly one of draft_model_path and draft_model.")
    draft_model: HubModel | None = Field(None, description=DRAFT_MODEL)
    block_size: Int = Field(16, ge=1, le=16, description="--speculative-dflash-block-size, 1..16.")
    tree_budget: Int = Field(ge=1, le=1024, description="--speculative-ddtree-budget: tree nodes verified per step, 1..1024.")

    @model_validator(mode="after")
    def _one_draft(self) -> DDTree:
        _one_of(self.draft_model_path, self.draft_model, "draft_model_path", "draft_model")
        return self


Speculative = Annotated[
    Union[NoSpeculation, EagleFamily, Ngram, DFlash, DDTree],
    Field(discriminator="algorithm"),
]


class Readiness(Strict):
    """How long and how often the rollout waits for the new service."""

    load_timeout_s: Number = Field(
        1200, ge=1, le=14400, description="Give up (and roll back) if /health is not 200 by then, 1..14400 s. "
        "Sized for a 27B model load from local NVMe plus CUDA graph capture."
    )
    poll_interval_s: Number = Field(
        0.5, ge=0.05, le=2, description="Seconds between polls of the unit and /health, 0.05..2, made on the host "
        "itself (one SSH command per change of state, not per poll); a crash is seen within one."
    )
    progress_every_s: Number = Field(15, ge=1, le=3600,
                                     description="Print elapsed time and state this often while waiting, 1..3600 s.")
    workload_release_timeout_s: Number = Field(
        120, ge=1, le=3600, description="How long stopped workloads get to release GPU memory, 1..3600 s."
    )
    command_timeout_s: Number = Field(
        30, ge=1, le=600, description="How long one command reading the host (nvidia-smi, the engine's "
        "import) may run, 1..600 s: a GPU fallen off the bus makes nvidia-smi hang for good. Past it the host is "
        "refused, naming the command; the other hosts go on.",
    )
    link_timeout_s: Number = Field(
        60, ge=4, le=3600, description="How long a host may answer nothing (a link that drops silently: a "
        "switch, a VPN) before the rollout gives it up, 4..3600 s. While its rollout runs the deploy renews its "
        "lock's lease every quarter of this and gives the host up after half of it without an answer: its row "
        "says LOST, nothing more runs on it (no rollback over a dead link), it keeps its pending-rollout record, "
        "and its class stops as after any failure. A lease not renewed for this long (by the host's clock) is "
        "stale: the next run, from any machine, takes the lock over and finishes or rolls back that rollout. SSH "
        "keepalives go every quarter of it, and the controller's kernel drops a connection whose data stays "
        "unacknowledged this long (Linux), for make status and make verify too (a host of no class, the "
        "gateway: this default).",
    )


class Smoke(Strict):
    """The OpenAI-API chat completion that must succeed after a rollout."""

    prompt: text(PROMPT_MAX) = Field(
        "Say hello in one short sentence.", min_length=1,
        description=f"The user message, 1..{PROMPT_MAX} characters (any Unicode but control characters): "
        "the request travels JSON-escaped in one shell argument on the host.")
    max_tokens: Int = Field(16, ge=1, le=512, description="The reply's max_tokens, 1..512.")
    timeout_s: Number = Field(120, ge=1, le=3600, description="How long the request may take, 1..3600 s.")


Percent = Annotated[str, StringConstraints(pattern=r"^(100|[1-9][0-9]?)%$"), Kind("percentage")]  # pydantic's regex: $ ends the text


class Rolling(Strict):
    """How the hosts of a class restart: its first host in inventory order (the canary) alone, then
    at most max_unavailable at a time, each only after the one before passed its gate and smoke
    test; the first failure stops the class, and the hosts whose turn had not come stay as they are."""

    max_unavailable: Annotated[int, Field(strict=True, ge=1, le=1024)] | Percent = Field(
        1, description="Hosts restarting at once after the canary: a count, 1..1024, or a percentage of the "
        "class's hosts in the inventory ('25%': rounded down, at least 1).")

    def at_once(self, hosts: int) -> int:
        """How many hosts of a class of `hosts` may restart at once after the canary."""
        if isinstance(self.max_unavailable, int):
            return self.max_unavailable
        return max(1, hosts * int(self.max_unavailable.rstrip("%")) // 100)


# --- engine: the SGLang a class runs, installed by the deploy --------------------------------

REQUIREMENTS_MAX = 64  # companions of one engine


def _requirement(v: str):
    try:
        r = Requirement(v)
    except InvalidRequirement as e:
        raise ValueError(f"a pip requirement (name[extras]==version): {e}") from None
    pins = list(r.specifier)
    if r.url or r.marker or len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise ValueError("a requirement pinned to one version, as name[extras]==version (no URL, marker, range "
                         "or wildcard): an engine is named by what it installs")
    return r


def _pinned(v: str) -> str:
    _requirement(v)
    return v


Pinned = Annotated[Text, AfterValidator(_pinned), Kind("pinned requirement")]


def _index_url(v: str) -> str:
    u = urlsplit(v)
    if u.scheme not in ("http", "https") or not u.hostname or any(c.isspace() for c in v):
        raise ValueError("an http(s) URL of a package index, e.g. https://pypi.org/simple")
    # Credentials in it would be in group_data (git), in pip's command line on every host (ps) and in the
    # deploy's log: a hosted index's token in the query (?token=) or fragment too. Only scheme and host are shown.
    if u.username is not None or u.password is not None:
        raise ValueError("an index URL without credentials (user:password@): the host's netrc holds those")
    if "?" in v or "#" in v:
        raise ValueError("an index URL without a query (?...) or fragment (#...), which may hold a token (not "
                         "shown): pip's command line on every host and the deploy's log would show it; credentials "
                         "go in the host's netrc")
    _host(u.hostname)
    return v


IndexUrl = Annotated[Text, AfterValidator(_index_url), Kind("index URL")]


def _wheel_file(v: str) -> str:
    try:
        parse_wheel_filename(PurePosixPath(v).name)
    except InvalidWheelFilename as e:
        raise ValueError(f"a wheel file's path (NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl): {e}") from None
    return v


WheelFile = Annotated[Text, AfterValidator(_wheel_file), Kind("wheel file")]
WHEELS_MAX = 1024  # wheel files of one engine (a whole wheelhouse: torch and its CUDA libraries are ~30)


class EngineSpec(Strict):
    """The SGLang a class runs, installed by the deploy (tasks/engine.py): each distinct engine in its
    own venv (fleet/layout.py), named by what it installs, built beside the live one before anything
    stops and kept for a rollback."""

    sglang: Pinned = Field(description="SGLang as pip's requirement, pinned: `sglang==0.5.23`, extras allowed "
                           "(`sglang[all]==0.5.23`); a build of your own by its version (`sglang==0.5.24.dev29907`).")
    packages: list[Pinned] = Field(
        default_factory=list, max_length=REQUIREMENTS_MAX,
        description="Pinned companions installed with it (`flashinfer-python==0.5.3`, `torch==2.9.1`), each "
        f"`name==version`, at most {REQUIREMENTS_MAX}.")
    index_url: IndexUrl | None = Field("https://pypi.org/simple",
                                       description="Package index the hosts install from (pip --index-url): PyPI or "
                                       "an internal mirror; no credentials in it. None: no index (pip --no-index), "
                                       "everything from `wheels`, for hosts that reach none.")
    extra_index_urls: list[IndexUrl] = Field(default_factory=list, max_length=8,
                                             description="More indexes (pip --extra-index-url), e.g. PyTorch's "
                                             "for CUDA wheels; at most 8.")
    wheels: list[WheelFile] = Field(
        default_factory=list, max_length=WHEELS_MAX,
        description="Wheel files on the controller (relative to where the deploy runs, or absolute), uploaded to "
        "each host that installs this engine and offered to pip beside the index (pip --find-links): a build of "
        "your own (sglang PR 29907's DDTree), or a whole wheelhouse (group_data is Python: "
        "`sorted(str(p) for p in Path('wheelhouse').glob('*.whl'))`). A wheel is known by its file name: a rebuild "
        f"takes a new version or build tag (NAME-VERSION-BUILD-...), at most {WHEELS_MAX}.")
    python: CommandPath = Field("/usr/bin/python3", description="The host's Python the venv is made from.")
    disk_mib: Int = Field(20480, ge=0, le=10_485_760,
                          description=f"Free disk the install needs at {layout.ENGINES_DIR}, MiB: a CUDA SGLang "
                          "0.5.23 venv is ~10.5 GB on disk (207 wheels, 4.35 GB to download: torch, its CUDA "
                          "libraries, sglang-kernel, triton, flashinfer; pip keeps no cache here); the host is "
                          "refused before the install with less, 0..10485760.")
    install_timeout_s: Number = Field(1800, ge=1, le=86_400, description="Longest the install may take (a pip "
                                      "download of several GiB), 1..86400.")
    keep: Int = Field(2, ge=0, le=100, description="Engines no unit uses (neither the live one nor a kept "
                      "backup's) kept, the newest; older ones are removed when an engine is installed, 0..100.")

    @field_validator("sglang")
    @classmethod
    def _is_sglang(cls, v: str) -> str:
        if canonicalize_name(_requirement(v).name) != "sglang":
            raise ValueError("SGLang's requirement: sglang==VERSION (companions go in engine.packages)")
        return v

    @field_validator("packages")
    @classmethod
    def _companions(cls, packages: list[str]) -> list[str]:
        names = [canonicalize_name(_requirement(p).name) for p in packages]
        if "sglang" in names:
            raise ValueError("no sglang here: engine.sglang names it")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"each package once; found {', '.join(twice)} more than once")
        return packages

    @property
    def version(self) -> str:
        """SGLang's pinned version."""
        return next(iter(_requirement(self.sglang).specifier)).version

    @property
    def name(self) -> str:
        """The venv's directory name: SGLang's version and a hash of everything that decides what is
        installed (the same declaration on every host gets the same name; another gets another)."""
        what = self.model_dump(include={"sglang", "packages", "index_url", "extra_index_urls", "python"})
        if self.wheels:
            what["wheels"] = sorted(PurePosixPath(w).name for w in self.wheels)
        return f"sglang-{self.version}-{hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]}"

    @property
    def requirements(self) -> list[str]:
        return [self.sglang, *self.packages]


class HubSpec(Strict):
    """Where models declared by repository come from and where they go on the hosts (tasks/hub.py)."""

    endpoint: IndexUrl = Field("https://huggingface.co", description="The Hugging Face endpoint the hosts fetch "
                               "from (HF_ENDPOINT): the public hub or an internal mirror (olah, a proxy); no "
                               "credentials in it.")
    token: Source | None = Field(None, description="Where the access token comes from (`{'env': 'HF_TOKEN'}`), for "
                                 "gated or private repositories: read when a deploy runs, uploaded to a 0600 file "
                                 "for the fetch only (HF_TOKEN_PATH), never on a command line.")
    models_dir: AbsPath = Field(layout.MODELS_DIR, description="Where the revisions go on the hosts: "
                                "MODELS_DIR/ORG/NAME/REVISION (a local disk: SGLang reads the weights from it at "
                                "every start).")
    client: Annotated[Text, AfterValidator(_pinned)] = Field(
        "huggingface_hub==2.4.0", description="The client that fetches, pinned: downloaded once into the "
        "controller's wheel cache and installed on each host beside the engines (hosts need no index).")
    python: CommandPath = Field("/usr/bin/python3", description="The host's Python the client runs with.")
    max_parallel: Int = Field(4, ge=1, le=1024, description="Hosts fetching from this endpoint at once in a run, "
                              "across all classes, 1..1024: a class of many hosts does not hammer the hub (its rate "
                              "limits) or a mirror's uplink.")
    disk_margin_mib: Int = Field(10240, ge=0, le=10_485_760, description="Free disk left at models_dir after a "
                                 "fetch, MiB: a host with less than the revision's size plus this is refused before "
                                 "the fetch, 0..10485760.")
    fetch_timeout_s: Number = Field(14400, ge=1, le=172_800, description="Longest one revision's fetch may take, "
                                    "1..172800 s (a 55 GB 27B model at 100 MB/s: about 10 minutes).")
    keep: Int = Field(1, ge=0, le=100, description="Revisions of a repository no unit uses (neither the live one nor "
                      "a kept backup's) kept, the newest; older ones are removed after a fetch, 0..100.")

    @field_validator("client")
    @classmethod
    def _is_the_hub_client(cls, v: str) -> str:
        if canonicalize_name(_requirement(v).name) != "huggingface-hub":
            raise ValueError("huggingface_hub==VERSION (the client the deploy runs on the hosts)")
        return v

    def revision_dir(self, model: HubModel) -> str:
        if model.revision is None:  # ClassSpec.with_commits first (fleet.hub.pin_branches)
            raise ValueError(f"{model.repo}: branch {model.branch} is not resolved to a commit yet")
        return f"{self.models_dir}/{model.repo}/{model.revision}"


# --- workloads: the GPU jobs stopped in the host's turn and given back on a rollback -------------

WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")  # no '.': never mistaken for a unit
SCOPE_PATTERN = re.compile(r"^(?![.-])[A-Za-z0-9:_.\\@*?-]{1,249}\.scope\Z")
GLOB_MAX = 1024  # characters of a process pattern: matching costs pattern x text at worst
GLOB_RULE = "`*` matches any characters, `?` one, every other character itself"
ARGV_MAX = 64  # arguments of a give-back command


def _workload_name(v: str) -> str:
    if not WORKLOAD_NAME.match(v):
        raise ValueError("a name of ASCII letters, digits, - and _, starting with a letter or digit, at most 64 "
                         "characters")
    return v


def _scope_pattern(v: str) -> str:
    if not SCOPE_PATTERN.match(v):
        raise ValueError(f"a scope's unit name ending in .scope, {GLOB_RULE}: {UNIT_RULE}, `*` and `?`, at most "
                         f"{UNIT_NAME_MAX} characters (e.g. 'docker-*.scope')")
    if not v.removesuffix(".scope").strip("*?"):
        raise ValueError("a pattern naming the scopes' kind, e.g. 'docker-*.scope': this one matches every scope, "
                         "ssh logins' session-N.scope too")
    return v


def _glob(v: str) -> str:
    if not v.strip("*?"):
        raise ValueError("a pattern with a character that is not a wildcard: this one matches every process")
    return v


def _argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    try:
        _absolute(argv[0])  # no PATH lookup: the host's PATH does not choose the program
    except ValueError as e:
        raise ValueError(f"its first element, the program, as {e}") from None
    return argv


def _give_back_kind(v: typing.Any) -> str:
    # False is the declaration "not given back"; 0 or "false" would be a slip, not one
    return "false" if v is False else "command"


def _a_command(v: typing.Any) -> typing.Any:
    if not isinstance(v, (list, tuple)):
        raise ValueError("false (it is not given back) or the command that starts it again, an argv list such as "
                         "['/usr/bin/docker', 'start', 'trainer']")
    return v


WorkloadName = Annotated[str, AfterValidator(_workload_name), Kind("name")]
ScopePattern = Annotated[str, AfterValidator(_scope_pattern), Kind("scope pattern")]
Glob = Annotated[text(GLOB_MAX), AfterValidator(_glob), Kind(f"pattern (≤ {GLOB_MAX} chars)")]
# a tuple: a workload is hashable (frozen) like the spec's other values
Argv = Annotated[tuple[Text, ...], BeforeValidator(_a_command), Field(min_length=1, max_length=ARGV_MAX),
                 AfterValidator(_argv), Kind("argv list (absolute path first)")]
GiveBack = Annotated[Union[Annotated[Literal[False], Tag("false")], Annotated[Argv, Tag("command")]],
                     Discriminator(_give_back_kind), Kind("false | argv list (absolute path first)")]

GIVE_BACK = (
    "How a rollback starts it again, required (the deploy cannot restart a scope or a process by itself): "
    "`false`, it is not given back and the summary row and the deploy record say `<name> was not restarted "
    "(declared so)`; or the command that starts it, an argv list whose first element is an absolute path, e.g. "
    "`['/usr/bin/docker', 'start', 'trainer']`. The command runs as root on the host only if this run (or the "
    "interrupted one it took over) stopped the workload: each element quoted as one argument, run directly (no "
    "shell, no PATH lookup), stdin from /dev/null, its output to the state directory's `give-back.<name>.log`, "
    "killed after readiness.workload_release_timeout_s. It must return once the workload runs (as `docker start` "
    "does); the workload must then hold GPU memory again within readiness.workload_release_timeout_s. Root adds no "
    "trust: the command is group_data's, never a host's, and group_data already names what root runs "
    "(service.launcher)."
)


class ScopeWorkload(Strict):
    """A workload in a systemd scope: a container (docker-<id>.scope, libpod-<id>.scope), a Slurm step
    (slurmstepd.scope), a `systemd-run --scope` job. A GPU process is its if its cgroup's unit (the first
    unit below the slices, as `systemctl status PID` names it) matches `scope`."""

    name: WorkloadName = Field(description="What the summary, the plan and the deploy records call it: ASCII "
                               "letters, digits, - and _, at most 64 characters; unique among the workloads.")
    scope: ScopePattern = Field(description="The scope's unit name, " + GLOB_RULE + " (e.g. 'docker-*.scope'): "
                                "each matching scope that holds a GPU is stopped with `systemctl stop` (SIGTERM to "
                                "its processes, SIGKILL after the scope's TimeoutStopSec). A container with a restart "
                                "policy comes back by itself: the stop then fails on the release wait, and the "
                                "host rolls back.")
    give_back: GiveBack = Field(description=GIVE_BACK)

    def matches(self, unit: str | None, process_name: str, command_line: str | None) -> bool:
        return unit is not None and glob_matches(self.scope, unit)  # the pattern ends in .scope: scopes only


class ProcessWorkload(Strict):
    """A workload of bare processes (a `torchrun` started by hand in tmux, a job under nohup): a GPU process
    is its if its name or its command line matches the declared pattern. Only the GPU processes found are
    stopped: a supervisor that restarts them (torchrun --max-restarts, a restart loop) brings them back,
    and the stop then fails on the release wait; declare such a job by its service or scope."""

    name: WorkloadName = Field(description="What the summary, the plan and the deploy records call it: ASCII "
                               "letters, digits, - and _, at most 64 characters; unique among the workloads.")
    process_name: Glob | None = Field(None, description="The process name as nvidia-smi lists it "
                                      "(`process_name`, e.g. '/usr/bin/python3'), " + GLOB_RULE + ". Exactly one "
                                      "of process_name and command_line.")
    command_line: Glob | None = Field(None, description="The process's command line as /proc/PID/cmdline holds it, "
                                      "its arguments joined by single spaces (as `ps -o args` shows them; at most "
                                      "its first 8192 characters), " + GLOB_RULE + ", e.g. '*torchrun*train.py*'.")
    kill_after_s: Number = Field(30, ge=1, le=600, description="The stop sends SIGTERM to each process found, and "
                                 "SIGKILL to one still running after this, 1..600 s; a process whose pid another "
                                 "process took meanwhile (its start time differs) is not signalled.")
    give_back: GiveBack = Field(description=GIVE_BACK)

    @model_validator(mode="after")
    def _one_pattern(self) -> ProcessWorkload:
        if (self.process_name is None) == (self.command_line is None):
            raise ValueError("exactly one of process_name (nvidia-smi's process name) or command_line (its "
                             "arguments) to match the processes by")
        return self

    def matches(self, unit: str | None, process_name: str, command_line: str | None) -> bool:
        if self.process_name is not None:
            return glob_matches(self.process_name, process_name)
        return command_line is not None and glob_matches(self.command_line, command_line)


def _workload_kind(v: typing.Any) -> str | None:
    if isinstance(v, str):
        return "service"
    if isinstance(v, BaseModel):  # a spec validated again (model_validate of a ClassSpec's fields)
        v = v.model_dump()
    if isinstance(v, dict):
        return "scope" if "scope" in v else "process" if {"process_name", "command_line"} & set(v) else None
    return None


WORKLOAD_KINDS = ("a service's unit name (e.g. 'dflash-train'), or a table with `scope` (a scope workload) or "
                  "`process_name` or `command_line` (a process workload), each with name and give_back")


def _unit_at_the_element(v: typing.Any, handler: typing.Any) -> typing.Any:
    # A refused unit name is reported at workloads.N, as before tables came: not at workloads.N.service
    try:
        return handler(v)
    except ValidationError as e:
        if isinstance(v, str):
            raise ValueError(e.errors()[0]["msg"].removeprefix("Value error, ")) from None
        raise


Workload = Annotated[
    Union[Annotated[WorkloadUnit, Tag("service")], Annotated[ScopeWorkload, Tag("scope")],
          Annotated[ProcessWorkload, Tag("process")]],
    Discriminator(_workload_kind, custom_error_type="workload_kind", custom_error_message=f"expected {WORKLOAD_KINDS}"),
    WrapValidator(_unit_at_the_element),
]
HeldWorkload = ScopeWorkload | ProcessWorkload  # a workload systemd does not know by a name of ours


def workload_name(w: str | HeldWorkload) -> str:
    """A service workload's unit, another's declared name."""
    return w if isinstance(w, str) else w.name


# --- tune: what `make tune` measures (ops/tune.py); never part of a deployed service ------------

TUNE_BLOCK_SIZES = (4, 8, 12, 16)  # tune.block_sizes' default, cut at the declared block size
BlockSize = Annotated[int, Field(strict=True, ge=1, le=16)]
TreeBudget = Annotated[int, Field(strict=True, ge=1, le=1024)]
Concurrency = Annotated[int, Field(strict=True, ge=1, le=1024)]


def _distinct_sorted(v: list | None) -> list | None:
    if v is not None and len(set(v)) != len(v):
        raise ValueError("each value once")
    return None if v is None else sorted(v)


class Tune(Strict):
    """`make tune`: the candidates swept on one host of the class, the fixed workload each is measured
    with, and the objective that picks the winner. Read by the tune only: a change here changes no host."""

    block_sizes: Annotated[list[BlockSize], Field(min_length=1, max_length=16), AfterValidator(_distinct_sorted)] | None = Field(
        None, description="The block sizes tried (DFLASH, DDTREE), 1..16 each; unset: 4, 8, 12, 16 up to the "
        "declared speculative.block_size (the operator's bound), and that one.")
    tree_budgets: Annotated[list[TreeBudget], Field(min_length=1, max_length=16), AfterValidator(_distinct_sorted)] | None = Field(
        None, description="DDTREE: the tree budgets tried with each block size, 1..1024; unset: half the declared "
        "one, it and twice it (within 1..1024).")
    concurrency: Annotated[list[Concurrency], Field(min_length=1, max_length=8), AfterValidator(_distinct_sorted)] = Field(
        [1, 8, 32], description="The concurrencies each candidate is measured at (streams in flight at once).")
    rounds: Int = Field(4, ge=1, le=100, description="Requests per concurrency: concurrency x rounds, at least "
                        "min_requests; 1..100.")
    min_requests: Int = Field(8, ge=1, le=10000, description="The fewest requests one concurrency is measured "
                              "with, 1..10000.")
    max_tokens: Int = Field(256, ge=1, le=8192, description="max_tokens of every request, 1..8192 (all run to it: "
                            "the figures compare like with like).")
    prompts: Annotated[list[Text], Field(min_length=1, max_length=256)] | None = Field(
        None, description="The prompts, sent in turn; unset: the shipped set (fleet/tune.py PROMPTS: prose, code, "
        "reasoning, chat; accept lengths differ by kind).")
    level_timeout_s: Number = Field(600, ge=1, le=7200, description="The most one concurrency's requests may take, "
                                    "1..7200 s; past it the rest count as failed.")
    objective_concurrency: Concurrency | None = Field(
        None, description="The overall winner is the candidate with the most output tokens/s at this concurrency "
        "(one of tune.concurrency); unset: the highest.")
    p99_latency_s: Number | None = Field(None, ge=0.001, le=3600, description="A latency bound, 0.001..3600 s: a "
                                         "candidate whose p99 request latency at the objective concurrency is above "
                                         "it cannot win.")

    @model_validator(mode="after")
    def _objective_measured(self) -> Tune:
        if self.objective_concurrency is not None and self.objective_concurrency not in self.concurrency:
            raise ValueError(f"objective_concurrency {self.objective_concurrency} is not one of concurrency "
                             f"{self.concurrency}")
        return self

    @property
    def objective(self) -> int:
        return self.objective_concurrency or max(self.concurrency)

    def requests(self, concurrency: int) -> int:
        return max(concurrency * self.rounds, self.min_requests)


class ClassSpec(Strict):
    """Everything declared for one GPU class (one group_data file over all.py)."""

    gpu_class: GpuClass = Field(description="Which GPUs a host of this class must have (preflight refuses others).")
    service: Service = Field(description="The SGLang server unit.")
    speculative: Speculative = Field(
        default_factory=lambda: NoSpeculation(algorithm="none"),
        description="Discriminated on `algorithm`: none, EAGLE/EAGLE3/NEXTN/STANDALONE, NGRAM, DFLASH, DDTREE.",
    )
    workloads: list[Workload] = Field(
        default_factory=list,
        description="What else holds the GPUs (the training): stopped in the host's turn, just before its restart, "
        "until none of its processes holds GPU memory (readiness.workload_release_timeout_s), and given back if "
        "the host rolls back. Each one is a service, a scope or processes. A service is its unit name (e.g. "
        "'dflash-train'; a name without `.service` gets it; " + UNIT_RULE + ", `@` only as in name@instance): "
        "stopped and disabled, given back enabled and started as it was. A scope (a container, a Slurm step) is a "
        "table `{'name': 'trainer', 'scope': 'docker-*.scope', 'give_back': ...}`: stopped with `systemctl stop`; "
        "processes are `{'name': 'torchrun', 'command_line': '*torchrun*', 'give_back': False}` or match "
        "`process_name` (nvidia-smi's) instead: sent SIGTERM, SIGKILL after `kill_after_s` (default 30, 1..600). "
        "`name`: how the summary calls it (letters, digits, - and _); patterns: " + GLOB_RULE + "; the command line "
        "is /proc's, its arguments joined by spaces. `give_back`, required: `False` (not given back: the summary "
        "says `<name> was not restarted (declared so)`) or the command that starts it again, an argv list from an "
        "absolute path (`['/usr/bin/docker', 'start', 'trainer']`), run as root only after this run stopped it, "
        "each element quoted, no shell, bounded by readiness.workload_release_timeout_s (ScopeWorkload and "
        "ProcessWorkload in fleet/spec.py say all). A GPU process is the first workload's that matches it, "
        "services first; the service's own are never a workload's, nor one nvidia-smi lists without a pid ([N/A] "
        "where it runs in a container): it keeps its host refused as GPUs busy.",
    )
    readiness: Readiness = Field(default_factory=Readiness, description="The rollout's wait for /health.")
    smoke: Smoke = Field(default_factory=Smoke, description="The chat completion a rollout must pass.")
    rolling: Rolling = Field(default_factory=Rolling, description="How many of its hosts restart at once, after the "
                             "canary.")
    engine: EngineSpec | None = Field(None, description="The SGLang to install and run (its venv is the launcher); "
                                      "unset: a hand-made environment at service.launcher.")
    hub: HubSpec = Field(default_factory=HubSpec, description="Where models declared by repository (service.model, "
                         "speculative.draft_model) are fetched from and kept.")
    tune: Tune = Field(default_factory=Tune, description="What make tune sweeps and how it picks.")

    @field_validator("workloads")
    @classmethod
    def _each_once(cls, workloads: list) -> list:
        names = [workload_name(w) for w in workloads]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"each workload once; found {', '.join(twice)} more than once")
        return workloads

    @model_validator(mode="after")
    def _cross_checks(self) -> ClassSpec:
        if self.gpu_class.gpu_count % self.service.tp_size:
            raise ValueError(
                f"service.tp_size {self.service.tp_size} does not divide gpu_class.gpu_count "
                f"{self.gpu_class.gpu_count}"
            )
        if self.engine is not None and self.service.launcher is not None:
            raise ValueError("engine and service.launcher are exclusive: the deploy installs the declared engine and "
                             "runs its venv; remove service.launcher, or engine to run a hand-made environment")
        if self.service_unit in self.service_workloads:
            raise ValueError(f"workloads lists the service's own unit {self.service_unit}")
        return self

    @property
    def service_unit(self) -> str:
        """The systemd unit's full name, e.g. sglang.service."""
        return f"{self.service.unit}.service"

    @property
    def launcher(self) -> str:
        """The interpreter the unit runs: the declared engine's venv, else service.launcher."""
        if self.engine is not None:
            return layout.engine_launcher(self.engine.name)
        return self.service.launcher or DEFAULT_LAUNCHER

    @property
    def service_workloads(self) -> list[str]:
        """The workloads that are services: their units."""
        return [w for w in self.workloads if isinstance(w, str)]

    @property
    def held_workloads(self) -> list[HeldWorkload]:
        """The workloads that are scopes or processes, known by what holds the GPUs."""
        return [w for w in self.workloads if not isinstance(w, str)]

    def workload(self, name: str) -> str | HeldWorkload:
        """The declared workload of that name (KeyError if none)."""
        return {workload_name(w): w for w in self.workloads}[name]

    @property
    def watched_units(self) -> list[str]:
        """The service's unit and the service workloads', whose states preflight reads."""
        return [self.service_unit, *self.service_workloads]

    @property
    def target_path(self) -> str:
        """The target's directory on the host: service.model_path, or its revision's."""
        return self.service.model_path or self.hub.revision_dir(self.service.model)

    @property
    def draft_path(self) -> str | None:
        """The draft's directory on the host, if the algorithm has one."""
        s = self.speculative
        model = getattr(s, "draft_model", None)
        return getattr(s, "draft_model_path", None) or (self.hub.revision_dir(model) if model else None)

    @property
    def model_paths(self) -> list[str]:
        """Target first, then the draft if the algorithm has one."""
        return [self.target_path] + ([self.draft_path] if self.draft_path else [])

    @property
    def by_repository(self) -> list[HubModel]:
        """The models declared by repository (target, then draft), resolved or not."""
        return [m for m in (self.service.model, getattr(self.speculative, "draft_model", None)) if m is not None]

    @property
    def branches(self) -> list[HubModel]:
        """The models declared by branch alone, not yet resolved to a commit."""
        return [m for m in self.by_repository if m.revision is None]

    def with_commits(self, commits: dict[tuple[str, str], str]) -> ClassSpec:
        """This spec with each model declared by branch at its commit ((repo, branch) -> commit)."""
        def pinned(m: HubModel | None) -> HubModel | None:
            if m is None or m.revision is not None:
                return m
            return m.model_copy(update={"revision": commits[(m.repo, m.branch)]})
        service = self.service.model_copy(update={"model": pinned(self.service.model)})
        if not hasattr(self.speculative, "draft_model"):
            return self.model_copy(update={"service": service})
        draft = self.speculative.model_copy(update={"draft_model": pinned(self.speculative.draft_model)})
        return self.model_copy(update={"service": service, "speculative": draft})

    @property
    def hub_models(self) -> dict[str, HubModel]:
        """The models declared by repository: their directory on the host -> the model."""
        models = {self.target_path: self.service.model, self.draft_path: getattr(self.speculative, "draft_model", None)}
        return {path: m for path, m in models.items() if m is not None}

    # Where the service's files and the deploy's state live on a host (fleet/layout.py)
    @property
    def unit_file(self) -> str:
        return layout.unit_file(self.service.unit)

    @property
    def env_file(self) -> str:
        return layout.env_file(self.service.unit)

    @property
    def secret_file(self) -> str:
        """The 0600 environment file of service.secret_environment."""
        return layout.secret_file(self.service.unit)

    @property
    def config_file(self) -> str:
        """The 0600 YAML the server reads its secret arguments from (--config)."""
        return layout.config_file(self.service.unit)

    @property
    def auth_header_file(self) -> str:
        """The 0600 `Authorization:` header requests made on the host send (curl -H @file)."""
        return layout.auth_header_file(self.service.unit)

    @property
    def state_dir(self) -> str:
        return layout.state_dir(self.service.unit)

    @property
    def backups_dir(self) -> str:
        return layout.backups_dir(self.service.unit)

    @property
    def deployed_spec_file(self) -> str:
        return layout.deployed_spec_file(self.service.unit)

    @property
    def pending_file(self) -> str:
        return layout.pending_file(self.service.unit)

    @property
    def tune_file(self) -> str:
        return layout.tune_file(self.service.unit)

    @property
    def records_file(self) -> str:
        return layout.records_file(self.service.unit)

    @property
    def lock_file(self) -> str:
        return layout.lock_file(self.service.unit)

    def give_back_log(self, workload: str) -> str:
        """Where a workload's give-back command's output goes (kept: a child it leaves may write on)."""
        return layout.give_back_log(self.service.unit, workload)


SPECULATIVE_MODELS: dict[str, type[BaseModel]] = {
    tag: model
    for model in (NoSpeculation, EagleFamily, Ngram, DFlash, DDTree)
    for tag in typing.get_args(model.model_fields["algorithm"].annotation)
}
ALGORITHM_TAGS = tuple(SPECULATIVE_MODELS)

# The top-level names a group_data file may define (pyinfra merges them per host).
SPEC_KEYS = tuple(ClassSpec.model_fields)

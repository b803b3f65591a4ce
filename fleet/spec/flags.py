"""SGLang flags: those the spec sets or that take a secret, how SGLang's parser reads a token,
and the check of service.extra_args."""

from __future__ import annotations

import typing

from pydantic import TypeAdapter, ValidationError

from fleet.spec.secret import SECRET_WORDS, names_a_secret
from fleet.spec.text import Text

# --- extra_args: SGLang flags the spec does not own -------------------------------------------

# The server arguments the spec sets, each SGLang 0.5.23 option string (aliases too) -> the field
# that sets it. SGLang's parser keeps the last value given: one of these in extra_args would run a
# model, tp or draft preflight never checked. tests/unit/test_spec.py checks the table against the
# real parser's (lab/doubles/sglang/flags.json); fleet/rollout/render.py writes no other flag.
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

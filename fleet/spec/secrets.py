"""Secrets, read where the deploy runs, for the classes it deploys, and only then.

group_data names where each secret comes from (fleet.spec.SecretSource); this reads them.
A secret that cannot be read refuses that class's hosts, naming the variable or file: the
other classes deploy. The values live in memory only, until they are written into the
0600 files on the host (fleet/rollout/render.py); nothing else prints or stores them.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from fleet.core import controller
from fleet.spec import SECRET_FLAGS, ClassSpec, SecretSource, host_name_problem
from fleet.core.wire import excerpt

# A secret flag's field in SGLang's `server_args=ServerArgs(..., api_key='...', ...)` log line.
SERVER_ARGS_SECRET = re.compile(
    r"\b(" + "|".join(f[2:].replace("-", "_") for f in SECRET_FLAGS) + r")=(?:'[^']*'|\"[^\"]*\")")

# Plain characters only: the key goes into a YAML string, an HTTP header and argparse, which
# would take a leading '-' for a flag.
API_KEY = re.compile(r"^[A-Za-z0-9._~+/=][A-Za-z0-9._~+/=-]{7,}\Z")  # \Z: $ lets a final newline in
KEY_RULE = "8 or more of A-Z a-z 0-9 . _ ~ + / = - (not starting with -)"


@dataclass(frozen=True)
class Secrets:
    """The values of one class's declared secrets."""

    server: dict[str, str] = field(default_factory=dict)  # SGLang flag (YAML key, e.g. api-key) -> value
    environment: dict[str, str] = field(default_factory=dict)  # secret environment variable -> value
    hub_token: str | None = None  # hub.token's value: for the fetch only

    @property
    def api_key(self) -> str | None:
        return self.server.get("api-key")

    def values(self) -> list[str]:
        return [*self.server.values(), *self.environment.values(), *([self.hub_token] if self.hub_token else [])]

    def redact(self, text: str) -> str:
        """SGLang logs its server_args with the keys in clear: never pass that on to a terminal.
        Every value read, and every secret field of a server_args line, whatever key it holds (a
        rollback's backed-up service may run with a key the operator no longer has)."""
        for value in sorted(self.values(), key=len, reverse=True):
            text = text.replace(value, "***")
        return SERVER_ARGS_SECRET.sub(r"\1='***'", text)


class SecretError(Exception):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def _read(source: SecretSource, environ: Mapping[str, str], read_file: Callable[[Path], str]) -> str:
    if source.env is not None:
        if source.env not in environ:
            raise LookupError(f"environment variable {source.env} is not set where the deploy runs")
        return environ[source.env]
    path = Path(source.file).expanduser()
    try:
        return read_file(path).removesuffix("\n")
    except OSError as e:
        raise LookupError(f"file {path} cannot be read ({e.strerror or type(e).__name__})") from None


HOST_PLACEHOLDER = "{host}"


def for_host(source: SecretSource, host: str, where: str, field_name: str,
             realpath: Callable[[str], str] = os.path.realpath) -> SecretSource:
    """A file source with {host} filled in with a host's inventory name; SecretError naming the field unless the
    name is a DNS name or an address and the file, symlinks followed, stays in the directory the path declares
    before its first {host}: a name never leads the read elsewhere (../../other-env/gw-1, a link out)."""
    if source.file is None or HOST_PLACEHOLDER not in source.file:
        return source
    if broken := host_name_problem(host):
        raise SecretError([f"{where}: {field_name}: {HOST_PLACEHOLDER} in {source.file}: the host name: {broken}"])
    declared = source.file[:source.file.index(HOST_PLACEHOLDER)].rpartition("/")[0] or "/"
    filled = source.file.replace(HOST_PLACEHOLDER, host)
    inside, found = realpath(os.path.expanduser(declared)), realpath(os.path.expanduser(filled))
    if found == inside or os.path.commonpath([inside, found]) != inside:
        raise SecretError([f"{where}: {field_name}: {filled} is {excerpt(found)}: expected a file in {inside}, the "
                           f"directory before {HOST_PLACEHOLDER} in {source.file}"])
    return source.model_copy(update={"file": filled})


def server_field(flag: str) -> str:
    """The group_data field of a secret server flag (api-key: service.api_key)."""
    return f"service.{flag.replace('-', '_')}"


def resolve(spec: ClassSpec, where: str, environ: Mapping[str, str] = controller.ENVIRON,
            read_file: Callable[[Path], str] = controller.read_file) -> Secrets:
    """Every secret the spec declares, read now; SecretError naming each field, source and rule
    broken (never a value). where: the group file, for the messages."""
    problems: list[str] = []
    values: dict[str, dict[str, str]] = {"server": {}, "environment": {}, "hub": {}}
    declared = [("server", flag, server_field(flag), source)
                for flag, source in spec.service.server_secrets.items()]
    declared += [("environment", name, f"service.secret_environment.{name}", source)
                 for name, source in spec.service.secret_environment.items()]
    if spec.hub.token is not None and spec.by_repository:  # read only where a model is fetched
        declared.append(("hub", "token", "hub.token", spec.hub.token))
    for kind, name, field_name, source in declared:
        try:
            if kind == "server":
                values[kind][name] = read_key(source, where, field_name, environ, read_file)
                continue
            value = _read(source, environ, read_file)
        except SecretError as e:
            problems += e.problems
            continue
        except LookupError as e:
            problems.append(f"{where}: {field_name}: {e}; expected the secret there")
            continue
        if not value or "\n" in value:
            problems.append(f"{where}: {field_name}: the value of {source.describe()} is empty or spans "
                            "lines (the value is not shown)")
        else:
            values[kind][name] = value
    if problems:
        raise SecretError(problems)
    return Secrets(values["server"], values["environment"], values["hub"].get("token"))


def hub_token(spec: ClassSpec, environ: Mapping[str, str] = controller.ENVIRON,
              read_file: Callable[[Path], str] = controller.read_file) -> str | None:
    """hub.token's value where it can be read, else None (make status and make verify ask the endpoint
    a branch's commit with it, and carry on without it)."""
    try:
        return _read(spec.hub.token, environ, read_file) if spec.hub.token is not None else None
    except LookupError:
        return None


def read_key(source: SecretSource, where: str, field_name: str, environ: Mapping[str, str] = controller.ENVIRON,
             read_file: Callable[[Path], str] = controller.read_file,
             problem: Callable[[str], str | None] = lambda v: None if API_KEY.match(v) else f"expected {KEY_RULE}",
             what: str = "key") -> str:
    """One secret (an API key unless `problem` says another rule), read now; SecretError naming the field,
    the source and the rule (never the value)."""
    try:
        value = _read(source, environ, read_file)
    except LookupError as e:
        raise SecretError([f"{where}: {field_name}: {e}; expected the secret there"]) from None
    broken = problem(value)
    if broken:
        raise SecretError([f"{where}: {field_name}: the value of {source.describe()} is not a usable {what}: "
                           f"{broken} (the value is not shown)"])
    return value


def unread(spec: ClassSpec) -> Secrets:
    """Stand-ins for every declared secret, for checks that need to know which secret files a host
    has, not what they hold (`make verify` runs without the operator's secrets)."""
    return Secrets({flag: "unread" for flag in spec.service.server_secrets},
                   {name: "unread" for name in spec.service.secret_environment})


# --- make verify: no secret in any process's arguments, which every local user reads (ps, /proc/PID/cmdline) ---

# Every process of the host: its pid and its arguments (NUL-separated, as the kernel keeps them) in base64, one
# line each; a process that ended meanwhile gives an empty line, a kernel thread no arguments. Without base64 every
# line would be empty: the command fails instead.
ARGUMENTS = ("command -v base64 >/dev/null || exit 127; for d in /proc/[0-9]*; do printf '%s ' \"${d#/proc/}\"; "
             "base64 -w0 \"$d/cmdline\" 2>/dev/null; echo; done")
# A value this long shows only where it was put: a shorter one (a VRRP password may be 1 character) counts
# only as a whole argument or after '=', ':' or a space (--flag=value, user:value, Bearer value)
DISTINCT = 8


@dataclass(frozen=True)
class HostSecret:
    """A secret as the deploy left it on its host: the field that declares it, its 0600 file there, and the
    text around the value on that file's line (escaped: a backslash before each \\, " and $, as env_quote)."""

    name: str  # the operator's word for it: the group_data field, e.g. gateway.api_key
    path: str
    before: str
    after: str = ""
    escaped: bool = False

    def value(self, text: str) -> str | None:
        for line in text.splitlines():
            if line.startswith(self.before) and line.endswith(self.after) and \
                    len(line) >= len(self.before) + len(self.after):
                inner = line[len(self.before):len(line) - len(self.after)]
                return re.sub(r"\\(.)", r"\1", inner) if self.escaped else inner
        return None


def parse_arguments(text: str) -> tuple[dict[int, list[str]], list[str]]:
    """ARGUMENTS' answer: {pid: arguments}, and what could not be read (a line that is not a pid and base64)."""
    processes, unreadable = {}, []
    for n, line in enumerate(text.splitlines(), 1):
        pid, _, encoded = line.partition(" ")
        try:
            if not pid.isdigit() or not pid.isascii():
                raise ValueError
            argv = base64.b64decode(encoded, validate=True).decode(errors="replace")
        except ValueError:
            unreadable.append(f"line {n} of the process list is not a pid and its arguments in base64")
            continue
        processes[int(pid)] = argv.removesuffix("\0").split("\0") if argv else []
    return processes, unreadable


def _shows(value: str, argument: str) -> bool:
    if len(value) >= DISTINCT:
        return value in argument
    return argument == value or argument.endswith(("=" + value, ":" + value, " " + value))


def secrets_in_arguments(processes: Mapping[int, list[str]], secrets: Mapping[str, str]) -> list[str]:
    """Each process whose arguments hold a secret's value, named by its pid and program and the secret by its
    name: never a value (a program's name that holds one is not shown either)."""
    problems = []
    for pid, argv in sorted(processes.items()):
        program = os.path.basename(argv[0]) if argv and argv[0] else "?"
        if any(_shows(v, program) for v in secrets.values() if v):
            program = "its name not shown"
        found = [name for name, value in secrets.items() if value and any(_shows(value, a) for a in argv)]
        problems += [f"process {pid} ({program}): its arguments hold {name} (the value is not shown)"
                     for name in found]
    return problems

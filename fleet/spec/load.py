"""Load group_data/ the way pyinfra does, and validate it before any host is contacted.

pyinfra merges group data by top-level name: a class file's `readiness` replaces
all.py's `readiness` whole. We merge the same way, so what `make check` validates is
exactly what deploy.py sees on a host.
"""

from __future__ import annotations

import functools
import re
import types
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fleet.core import controller
from fleet.gateway import floating
from fleet.gateway.models import Gateway, check_routes
from fleet.monitoring.models import Monitoring
from fleet.monitoring.rules import floor_problems
from fleet.spec import ALGORITHM_TAGS, SPEC_KEYS, SPECULATIVE_MODELS, ClassSpec, SecretSource, Strict, masked_args, \
    names_a_secret
from fleet.spec.names import path_secret, split_http

ALL = "all"
# pyinfra's own per-host data (connector settings) may sit beside the spec.
CONNECTOR_PREFIXES = ("ssh_", "_")


class SpecError(Exception):
    """One or more group_data problems, each naming file, field, value and what is allowed."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def read_group_file(path: Path) -> dict[str, Any]:
    """The public names a group_data file defines, as pyinfra would take them."""
    stat = path.stat()
    return dict(_names_of(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=256)
def _names_of(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, Any], ...]:
    # A deploy reads each file once per host (which groups are classes, gateways): once per version
    # of the file is enough.
    names = controller.run_group_file(path)
    return tuple((k, v) for k, v in names.items()
                 if not k.startswith("__") and not isinstance(v, (types.ModuleType, types.FunctionType, type)))


def class_files(group_dir: Path) -> dict[str, Path]:
    """The GPU class files: those that declare `gpu_class`. Any other group file (connection data
    such as ssh_user and _sudo for a group of boxes, say) is ordinary pyinfra group data."""
    return {p.stem: p for p in sorted(group_dir.glob("*.py"))
            if p.stem != ALL and "gpu_class" in read_group_file(p)}


def gateway_files(group_dir: Path) -> dict[str, Path]:
    """The gateway files: those that declare `gateway` (smg in front of some classes)."""
    return {p.stem: p for p in sorted(group_dir.glob("*.py"))
            if p.stem != ALL and "gateway" in read_group_file(p)}


def monitoring_files(group_dir: Path) -> dict[str, Path]:
    """The monitoring files: those that declare `monitoring` (Prometheus and Alertmanager on a host of their own)."""
    return {p.stem: p for p in sorted(group_dir.glob("*.py"))
            if p.stem != ALL and "monitoring" in read_group_file(p)}


def _defaults(group_dir: Path) -> dict[str, Any]:
    return read_group_file(group_dir / f"{ALL}.py") if (group_dir / f"{ALL}.py").exists() else {}


def load_group_data(group_dir: Path) -> dict[str, dict[str, Any]]:
    """group -> all.py's data with the class file's names laid over it."""
    base = _defaults(group_dir)
    return {group: {**base, **read_group_file(path)} for group, path in class_files(group_dir).items()}


def spec_data(data: dict[str, Any]) -> dict[str, Any]:
    """The spec's part of a host's (or group's) data: connector settings left out."""
    return {k: v for k, v in data.items() if not k.startswith(CONNECTOR_PREFIXES)}


# Run together, these still name a secret (hftoken, sshpassword); TOKEN and KEY only at the end:
# max_tokens is no secret.
_SECRET_INSIDE = ("PASSWORD", "PASSWD", "SECRET", "APIKEY", "CREDENTIAL")
_SECRET_AT_END = ("TOKEN", "KEY")


def may_hold_a_secret(key: str) -> bool:
    """A key whose value a message never shows: a secret field (api_key, admin_api_key,
    secret_environment), or a misplaced or misspelt key that names a secret (api-key, HF_TOKEN,
    apiKey, Password, hftoken), whatever its case and separators."""
    folded = "".join(c for c in key.upper() if c.isalnum())
    return names_a_secret(key) or any(w in folded for w in _SECRET_INSIDE) or folded.endswith(_SECRET_AT_END)


_USERINFO = re.compile(r"(://)[^/@]*@")


def _origin(word: re.Match) -> str:
    # a URL's query, fragment or path may hold a token (?token=..., Slack's /services/...): such a URL is shown to
    # its host only
    scheme, sep, rest = word.group().partition("://")
    if not sep or ("?" not in rest and "#" not in rest and not path_secret(word.group())):
        return word.group()
    return f"{scheme}://{re.split('[/?#]', rest, maxsplit=1)[0]}/***"


def _redact(value: Any) -> Any:
    """A value as a message shows it: under a key that may hold a secret, at any depth, '***';
    in a list (extra_args), the value of a flag that takes a secret '***' (fleet.spec.masked_args)."""
    if isinstance(value, dict):  # a secret source's name or path under any key: it may be the secret pasted there
        source = bool(value) and value.keys() <= set(SecretSource.model_fields)
        return {k: "***" if source or isinstance(k, str) and may_hold_a_secret(k) else _redact(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redact(v) for v in masked_args(value))
    if isinstance(value, str):  # a URL's credentials (https://user:password@mirror/simple, ?token=...)
        return re.sub(r"\S+", _origin, _USERINFO.sub(r"\1***@", value))
    return value


def _show(loc: tuple, value: Any) -> str:
    secret = any(isinstance(p, str) and may_hold_a_secret(p) for p in loc)
    # a URL field's value that is no http(s) URL may be a pasted token, or a secret URL missing its scheme
    secret |= isinstance(value, str) and split_http(value) is None and any(
        isinstance(p, str) and p.endswith(("url", "urls", "endpoint")) for p in loc)
    text = repr("***" if secret else _redact(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed(raw_loc: tuple, root: type[BaseModel] = ClassSpec) -> str:
    """The keys a model at `raw_loc` (pydantic's path, union tag included) accepts, to tell an
    operator what a typo should have been."""
    model: type[BaseModel] | None = root
    loc = raw_loc
    if len(loc) > 2 and loc[0] == "speculative" and loc[1] in SPECULATIVE_MODELS:
        model, loc = SPECULATIVE_MODELS[loc[1]], loc[2:]
    for part in loc[:-1]:
        field = model.model_fields.get(part) if model else None
        ann = getattr(field, "annotation", None)
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None:
            return ""
    return ", ".join(model.model_fields) if model else ""


# A strict number's or flag's refusal (fleet.spec.Int, Number, Bool) in the operator's words: "30000" and True
# look like numbers, 1 and "yes" like flags.
_STRICT = {"int_type": "a whole number written as one (30000, not '30000' or True)",
           "float_type": "a number written as one (0.9 or 120, not '0.9' or True)",
           "bool_type": "True or False (not 1 or 'yes')"}


def _without_union_tag(loc: tuple) -> tuple:
    # pydantic puts the matched `algorithm` tag into the path: speculative.DFLASH.block_size
    if len(loc) > 1 and loc[0] == "speculative" and loc[1] in ALGORITHM_TAGS:
        return loc[:1] + loc[2:]
    return loc


def explain(source: str, err: ValidationError, root: type[BaseModel] = ClassSpec,
            blame: dict[str, str] | None = None) -> list[str]:
    """One line per problem, naming the file (blame: top-level name -> the file it came from, where
    that is not `source`), the field, the value (secrets masked) and what is allowed."""
    problems = []
    for e in err.errors():
        loc = _without_union_tag(e["loc"])
        where = (blame or {}).get(str(loc[0]) if loc else "", source)
        field = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            allowed = _allowed(e["loc"], root)
            problems.append(
                f"{where}: {field}: unknown key (value {_show(loc, e['input'])})"
                + (f"; allowed keys: {allowed}" if allowed else "")
            )
        elif e["type"] == "missing":
            problems.append(f"{where}: {field}: required, not given")
        elif e["type"] == "union_tag_invalid":  # pydantic's own text quotes the tag raw, at any length
            problems.append(f"{where}: {field} = {_show(loc, e['input'])}: algorithm {_show(loc, e['ctx']['tag'])} "
                            f"is none of the expected tags: {e['ctx']['expected_tags']}")
        elif e["type"] in _STRICT:
            problems.append(f"{where}: {field} = {_show(loc, e['input'])}: expected {_STRICT[e['type']]}, found "
                            f"{type(e['input']).__name__}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {field} = {_show(loc, e['input'])}: {msg}")
    return problems


def validate_class(source: str, data: dict[str, Any], blame: dict[str, str] | None = None) -> ClassSpec:
    try:
        return ClassSpec.model_validate(spec_data(data))
    except ValidationError as err:
        raise SpecError(explain(source, err, blame=blame)) from None


def validate_host(source: str, data: dict[str, Any]) -> ClassSpec:
    """A host's spec from its merged data (every group it is in, inventory data): the spec's
    names only, other groups' data is theirs. The class file itself is checked whole by
    load_class_specs (make check, and every inventory load), typos included."""
    return validate_class(source, {k: v for k, v in data.items() if k in SPEC_KEYS})


def _sections_elsewhere(group_dir: Path, classes: dict[str, Path]) -> list[str]:
    # pyinfra would lay such a file's `service` (or `readiness` ...) over the class file's for the hosts in
    # both groups: checked nowhere, and a bad value there would blame the class file.
    problems = []
    for path in sorted(group_dir.glob("*.py")):
        if path.stem == ALL or path.stem in classes:
            continue
        for key in sorted(set(read_group_file(path)) & set(SPEC_KEYS)):
            problems.append(f"{path}: {key}: sections of a class belong in its class file (or in {ALL}.py, for "
                            "every class); this file declares no gpu_class")
    return problems


def load_class_specs(group_dir: Path) -> dict[str, ClassSpec]:
    """Every GPU class, validated; all problems of all files reported together, each naming the file its
    value came from (all.py for a default no class file replaces)."""
    classes = class_files(group_dir)
    specs, problems = {}, _sections_elsewhere(group_dir, classes)
    defaults = _defaults(group_dir)
    for group, data in load_group_data(group_dir).items():
        own = read_group_file(classes[group])
        blame = {k: str(group_dir / f"{ALL}.py") for k in defaults if k not in own}
        try:
            specs[group] = validate_class(str(classes[group]), data, blame)
        except SpecError as e:
            problems += e.problems
    if problems:
        raise SpecError(list(dict.fromkeys(problems)))  # a default's problem once, not once per class
    return specs


class GatewayFile(Strict):
    gateway: Gateway


def validate_gateway(source: str, data: Any) -> Gateway:
    """A gateway file's `gateway` table; SpecError naming source, field, value and what is allowed."""
    try:
        return GatewayFile.model_validate({"gateway": data}).gateway
    except ValidationError as err:
        raise SpecError(explain(source, err, GatewayFile)) from None


def load_gateways(group_dir: Path, classes: dict[str, ClassSpec]) -> dict[str, Gateway]:
    """Every gateway file, validated, and checked against the classes it routes."""
    gateways, problems = {}, []
    for group, path in gateway_files(group_dir).items():
        try:
            gateways[group] = validate_gateway(str(path), read_group_file(path)["gateway"])
        except SpecError as e:
            problems += e.problems
    problems += check_routes(gateways, classes)
    problems += floating.router_id_problems({g: gw.floating for g, gw in gateways.items() if gw.floating is not None})
    if problems:
        raise SpecError(problems)
    return gateways


class MonitoringFile(Strict):
    monitoring: Monitoring


def load_monitoring(group_dir: Path, classes: dict[str, ClassSpec]) -> dict[str, Monitoring]:
    """Every monitoring file's `monitoring` table, validated (SpecError naming file, field, value)."""
    found, problems = {}, []
    for group, path in monitoring_files(group_dir).items():
        try:
            found[group] = MonitoringFile.model_validate({"monitoring": read_group_file(path)["monitoring"]}).monitoring
            problems += floor_problems(group, found[group], classes)
        except ValidationError as err:
            problems += explain(str(path), err, MonitoringFile)
    if problems:
        raise SpecError(problems)
    return found

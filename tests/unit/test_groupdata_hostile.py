"""Hostile group_data, generated: every string field of the spec and of the gateway (each element
of a list or dict too) gets control characters, separators, shell metacharacters, `$(...)`,
backticks, quotes, `%`, `$`, backslashes, a leading `-`, very long and non-ASCII text. Each value
is either refused with a SpecError naming its field (no other exception, one line per problem,
no secret shown) or accepted, and then every file rendered from it is what the spec asked for:
the unit passes `systemd-analyze verify` with exactly the directives the spec renders, its
ExecStart reads back (as systemd unquotes it) as server_argv, and the env file reads back as
the environment.

Reproducible: a fixed derandomized profile, no example database. systemd-analyze runs once per
test over every unit that test accepted (each call costs ~0.1 s).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.gateway.models import Gateway
from fleet.gateway.smg import launch_args
from fleet.spec.load import SpecError, validate_class, validate_gateway
from fleet.rollout.render import render_env, render_gateway_unit, render_unit, server_argv
from fleet.spec import ClassSpec
from test_render import parse_env_file, systemd_split
from test_spec import DEST_OF, OWNED_DESTS, argparse_reads

SRC = "group_data/x.py"
SECRET = "sk-HOSTILE-SECRET-0123456789"  # put where a secret goes: no message may show it
PROFILE = settings(derandomize=True, deadline=None, database=None, max_examples=100)

PIECES = ("\r", "\n", "\r\n", "\x00", "\t", "\x0b", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\ud800", ";", " ; ",
          "&&", "|", "$(id)", "`id`", "'", '"', "%", "%n", "%i", "%%", "$", "$HOME", "${HOME}", "$$", "\\", "\\n",
          "\\x41", "\\\n", " ", "-", "--", "-H", ".", "..", "/", "//", "=", "#", "[Service]",
          "\nExecStartPre=/bin/sh", "é", "😀", "用", "\u202e", "*", "?", "~", "{", "}", "@", ":", "x")
hostile = st.one_of(
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=10).map("".join),
    st.tuples(st.sampled_from(PIECES), st.integers(1000, 5000)).map(lambda t: t[0] * t[1]),  # very long
)
# Legal text with everything a shell or systemd reads specially in it: most of it is accepted, so
# what is rendered from it gets checked, not only the refusals.
TRICKY = tuple(p for p in PIECES if not re.search("[\x00-\x1f\x7f\x85\u2028\u2029\ud800]", p))
tricky = st.lists(st.one_of(st.sampled_from(TRICKY),
                            st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=6)),
                  min_size=1, max_size=10).map("".join)
text_field = st.one_of(hostile, tricky)
path_field = st.one_of(hostile, tricky.map(lambda s: "/m/" + s))
flag_field = st.one_of(hostile, tricky, tricky.map(lambda s: "--" + s))


def shaped(pattern: str, *plain: str):
    """Hostile text, or text of the field's shape (the pattern), or one of the plain values."""
    return st.one_of(hostile, st.from_regex(pattern, fullmatch=True), *(st.sampled_from(plain),) if plain else ())


needs_systemd = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd here")  # allowed: CI (Debian, make host-packages' systemd-container) has it


def base(launcher: str = sys.executable) -> dict:
    """A valid class spec's data (its launcher exists: systemd-analyze checks it)."""
    return {"gpu_class": {"accepted_models": ["NVIDIA RTX A6000"], "gpu_count": 2, "min_memory_mib": 48000},
            "service": {"model_path": "/root/models/Qwen3-8B", "served_model_name": "qwen3-8b", "host": "0.0.0.0",
                        "launcher": launcher, "api_key": {"env": "SGLANG_API_KEY_X"},
                        "environment": {"NCCL_DEBUG": "WARN"}},
            "speculative": {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3-8B-DFlash"},
            "workloads": ["dflash-train"]}


def service(**fields) -> dict:
    d = base()
    d["service"].update(fields)
    return d


UNIT_LIKE = r"[-A-Za-z0-9:_.\\@]{1,12}"
ENV_LIKE = r"[A-Za-z_][A-Za-z0-9_]{0,12}"
HOST_LIKE = r"[-A-Za-z0-9.:%]{1,16}"
ADDRESSES = ("0.0.0.0", "::", "10.0.0.5", "gpu-1.fleet.example", "fe80::1", "127.0.0.1", "localhost")

# what gets the value -> (the field a refusal names, the strategy, the class data holding the value)
CLASS_FIELDS = {
    "accepted_models[0]": ("gpu_class.accepted_models", text_field, lambda v: {
        **base(), "gpu_class": {**base()["gpu_class"], "accepted_models": [v]}}),
    "unit": ("service.unit", shaped(UNIT_LIKE), lambda v: service(unit=v)),
    "model_path": ("service.model_path", path_field, lambda v: service(model_path=v)),
    "served_model_name": ("service.served_model_name", text_field, lambda v: service(served_model_name=v)),
    "host": ("service.host", shaped(HOST_LIKE, *ADDRESSES), lambda v: service(host=v)),
    "extra_args[1,2]": ("service.extra_args", flag_field, lambda v: service(extra_args=["--log-level", v, v])),
    "environment value": ("service.environment", text_field, lambda v: service(environment={"NCCL_DEBUG": v})),
    "environment name": ("service.environment", shaped(ENV_LIKE), lambda v: service(environment={v: "1"})),
    "secret_environment name": ("service.secret_environment", shaped(ENV_LIKE),
                                lambda v: service(secret_environment={v: {"env": "HF_TOKEN"}})),
    "secret_environment source": ("service.secret_environment.HF_TOKEN", shaped(ENV_LIKE),
                                  lambda v: service(secret_environment={"HF_TOKEN": {"env": v}})),
    "api_key file": ("service.api_key", text_field, lambda v: service(api_key={"file": v})),
    "admin_api_key env": ("service.admin_api_key", shaped(ENV_LIKE), lambda v: service(admin_api_key={"env": v})),
    "draft_model_path": ("speculative.draft_model_path", path_field, lambda v: {
        **base(), "speculative": {"algorithm": "DFLASH", "draft_model_path": v}}),
    "algorithm": ("speculative", shaped(r"[A-Za-z0-9]{1,8}", "none", "EAGLE", "NEXTN", "NGRAM"),
                  lambda v: {**base(), "speculative": {"algorithm": v}}),
    "workloads[1]": ("workloads", shaped(UNIT_LIKE + r"(\.service)?"),
                     lambda v: {**base(), "workloads": ["dflash-train", v]}),
    "prompt": ("smoke.prompt", text_field, lambda v: {**base(), "smoke": {"prompt": v}}),
}


def refused(problems: list[str], field: str) -> None:
    """A refusal names the field, is one line per problem and shows no secret."""
    assert any(p.startswith(f"{SRC}: {field}") for p in problems), (field, problems)
    for p in problems:
        assert SECRET not in p, p
        assert not re.search("[\r\n\x00\x85\u2028\u2029]", p), p


# --- the rendered unit, read the way systemd reads it ------------------------------------------

def directives(unit: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of every directive, as systemd's parser finds them: lines end at LF, CR
    or NUL; a trailing backslash joins the next line (with a space); # and ; start comments."""
    out, section, pending = [], "", ""
    for raw in re.split("\r\n|\r|\n|\x00", unit):
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        line, pending = (pending + raw).strip(), ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def expected_directives(spec: ClassSpec) -> list[tuple[str, str]]:
    env_files = 1 + bool(spec.service.secret_environment)
    return sorted([("Unit", k) for k in ("Description", "Wants", "After", "StartLimitIntervalSec", "StartLimitBurst")]
                  + [("Service", k) for k in ("Type", "ExecStart", "Restart", "RestartSec", "KillMode",
                                              "TimeoutStopSec", "LimitNOFILE")]
                  + [("Service", "EnvironmentFile")] * env_files + [("Install", "WantedBy")])


def rendered_as_declared(spec: ClassSpec) -> str:
    """The unit and env file of an accepted spec say what it declares, nothing more; the unit text."""
    unit = render_unit(spec, "lab", journal_filter=False)
    found = directives(unit)
    assert sorted((s, k) for s, k, _ in found) == expected_directives(spec), found
    value = {(s, k): v for s, k, v in found}
    assert value[("Unit", "Description")].replace("%%", "%") == \
        f"SGLang {spec.service.served_model_name} (speculative: {spec.speculative.algorithm})"
    assert systemd_split(value[("Service", "ExecStart")]) == server_argv(spec)
    assert parse_env_file(render_env(spec)) == spec.service.environment
    return unit


class Units(dict):
    """Accepted units to verify, by the name each is verified under: its own where the field under
    test is the unit's name (one each), else a name of their own (systemd-analyze mixes up files
    verified under one name in one call)."""

    def add(self, name: str | None, text: str) -> None:
        self[name or f"u{len(self)}.service"] = text


def systemd_accepts(units: Units, root: Path) -> None:
    """`systemd-analyze verify` of every unit at once: no complaint about any. Each file is verified
    under its name (verify's FILE:NAME form: a unit name may hold a ':'), so systemd checks the name."""
    if not units:
        return
    root.mkdir(parents=True, exist_ok=True)
    args = []
    for i, (name, text) in enumerate(units.items()):
        (root / f"f{i}.service").write_text(text)
        args.append(f"{root}/f{i}.service:{name}")
    r = subprocess.run(["systemd-analyze", "verify", *args], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, ""), r.stderr[:2000]


@needs_systemd
@pytest.mark.parametrize("where", list(CLASS_FIELDS))
def test_a_hostile_string_in_a_class_field_is_refused_or_rendered_safely(where, tmp_path):
    field, strategy, place = CLASS_FIELDS[where]
    units = Units()
    named = field == "service.unit"

    @PROFILE
    @given(value=strategy)
    def check(value):
        try:
            spec = validate_class(SRC, place(value))
        except SpecError as e:
            refused(e.problems, field)
            return
        units.add(spec.service_unit if named else None, rendered_as_declared(spec))

    check()
    systemd_accepts(units, tmp_path / "units")


@needs_systemd
def test_a_hostile_launcher_is_refused_or_rendered_safely(tmp_path):
    """The launcher must exist for systemd-analyze: each accepted one is made, under a tmp dir."""
    units = Units()

    @PROFILE
    @given(value=text_field)
    def check(value):
        launcher = f"{tmp_path}/l{len(units)}/{value}py"
        try:
            spec = validate_class(SRC, base(launcher=launcher))
        except SpecError as e:
            refused(e.problems, "service.launcher")
            return
        Path(launcher).parent.mkdir(parents=True, exist_ok=True)
        Path(launcher).symlink_to(sys.executable)
        units.add(None, rendered_as_declared(spec))

    check()
    assert units, "no launcher was accepted: the property was not exercised"
    systemd_accepts(units, tmp_path / "units")


# --- extra_args: a whole command line of flags and values --------------------------------------

SGLANG_FLAGS = sorted(DEST_OF)
SECRET_DESTS = {"api_key", "admin_api_key", "ssl_keyfile_password"}


def prefixes(flags) -> list[str]:
    return sorted({f[:n] for f in flags for n in range(3, len(f) + 1)})


flag_like = st.one_of(
    st.sampled_from(SGLANG_FLAGS),
    st.sampled_from(prefixes(o for o, d in DEST_OF.items() if d in OWNED_DESTS)),  # the spec's, spelt any way
    st.sampled_from(prefixes(SGLANG_FLAGS)),  # abbreviated: argparse reads some as one flag
    st.sampled_from(SGLANG_FLAGS).map(lambda f: "--" + f[2:].replace("-", "_")),
    st.sampled_from(SGLANG_FLAGS).map(str.upper),
)
# Where a secret goes: after (or `=` of) a spelling of a secret flag, one that is no other flag exactly
SECRET_SPELLINGS = [p for p in prefixes(o for o, d in DEST_OF.items() if d in SECRET_DESTS)
                    if DEST_OF.get(p, "api_key") in SECRET_DESTS]
secret_pair = st.one_of(
    st.sampled_from(SECRET_SPELLINGS).flatmap(lambda f: st.sampled_from([[f, SECRET], [f"{f}={SECRET}"],
                                                                          [f.upper(), SECRET]])),
    st.just(["--hf-api-key", SECRET]),  # no SGLang flag, named as a secret
)
command_line = st.lists(st.one_of(flag_like.map(lambda f: [f]), text_field.map(lambda v: [v]), secret_pair),
                        max_size=6).map(lambda parts: [t for part in parts for t in part])


@needs_systemd
def test_hostile_extra_args_never_override_the_spec_nor_show_a_secret(tmp_path):
    """Accepted extra_args hold no token SGLang's parser would read as a flag the spec owns, and come
    out of the unit intact; a refusal shows no secret (a secret flag's value is masked)."""
    units = Units()

    @settings(PROFILE, max_examples=300)
    @given(args=command_line)
    def check(args):
        try:
            spec = validate_class(SRC, service(extra_args=args))
        except SpecError as e:
            refused(e.problems, "service.extra_args")
            return
        for a in args:
            name = a.split("=", 1)[0].replace("_", "-")
            assert not name.startswith("--") or name == "--" or argparse_reads(name) not in OWNED_DESTS, a
        units.add(None, rendered_as_declared(spec))
        argv = server_argv(spec)
        assert argv[len(argv) - len(args):] == args

    check()
    assert units, "no command line was accepted: the property was not exercised"
    systemd_accepts(units, tmp_path / "units")


# --- secrets put where they do not belong ------------------------------------------------------

secret_key = st.sampled_from(["api-key", "API_KEY", "apiKey", "token", "hf_token", "Password", "secret", "passwd",
                              "ssl_keyfile_password", "admin-api-key", "HFTOKEN", "private.key"])
secret_variable = st.sampled_from(["HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_PASSWD",
                                   "GH_CREDENTIALS", "X_APIKEY"])


@given(key=secret_key, variable=secret_variable, noise=hostile)
@PROFILE
def test_a_misplaced_secret_is_never_shown(key, variable, noise):
    """Under a misspelt or misplaced key that names a secret, or in the 0644 environment, beside any
    other problem."""
    for d in ({**base(), key: SECRET}, service(**{key: SECRET, "port": noise}),
              {**base(), "readiness": {key: SECRET + noise}}, service(environment={variable: SECRET + noise})):
        try:
            validate_class(SRC, d)
        except SpecError as e:
            assert all(SECRET not in p for p in e.problems), e.problems
        else:
            pytest.fail(f"accepted {d}")  # every one of these is wrong


# --- the gateway -------------------------------------------------------------------------------

def gateway_data(**fields) -> dict:
    return {"routes": ["pro6000"], "api_key": {"env": "GW_KEY"}, **fields}


GATEWAY_FIELDS = {
    "gateway.routes": (shaped(r"[A-Za-z0-9_%\\-]{1,10}"), lambda v: gateway_data(routes=[v])),
    "gateway.unit": (shaped(UNIT_LIKE), lambda v: gateway_data(unit=v)),
    "gateway.version": (shaped(r"v?[0-9]{1,3}(\.[0-9]{1,3}){0,3}([-._]?(rc|a|b|post|dev)[0-9]?)?(\+[a-z0-9.]{1,5})?"),
                        lambda v: gateway_data(version=v)),
    "gateway.python": (path_field, lambda v: gateway_data(python=v)),
    "gateway.host": (shaped(HOST_LIKE, *ADDRESSES), lambda v: gateway_data(host=v)),
    "gateway.policy": (shaped(r"[a-z_]{1,12}", "round_robin", "random"), lambda v: gateway_data(policy=v)),
    "gateway.api_key": (shaped(ENV_LIKE), lambda v: gateway_data(api_key={"env": v})),
}


def gateway_rendered_as_declared(gw: Gateway) -> str:
    unit = render_gateway_unit(gw, "gateway")
    found = directives(unit)
    expected = sorted([("Unit", "Description"), ("Unit", "Wants"), ("Unit", "After"), ("Service", "Type"),
                       ("Service", "ExecStartPre"), ("Service", "ExecStart"), ("Service", "Restart"),
                       ("Service", "RestartSec"), ("Service", "KillMode"), ("Service", "TimeoutStopSec"),
                       ("Install", "WantedBy")]
                      + [("Service", "EnvironmentFile")] * (gw.api_key is not None))
    assert sorted((s, k) for s, k, _ in found) == expected, found
    value = {(s, k): v for s, k, v in found}
    header = f" && install -m 0600 {shlex.quote(gw.declared_auth_header_file)} {shlex.quote(gw.auth_header_file)}" \
        if gw.api_key is not None else ""
    assert systemd_split(value[("Service", "ExecStartPre")], {}) == [
        "/bin/sh", "-c", f"mkdir -p /run/sglang-fleet && cp {shlex.quote(gw.generation_file)} "
                         f"{shlex.quote(gw.running_file)}{header}"]
    assert value[("Unit", "Description")].replace("%%", "%") == \
        f"SGLang model gateway (smg {gw.version}) for {', '.join(gw.routes)}"
    assert systemd_split(value[("Service", "ExecStart")], {}) == launch_args(gw)  # nothing expanded: no key
    return unit


@needs_systemd
@pytest.mark.parametrize("field", list(GATEWAY_FIELDS))
def test_a_hostile_string_in_a_gateway_field_is_refused_or_rendered_safely(field, tmp_path):
    """The smg it runs must exist for systemd-analyze: install_dir is a tmp dir holding one."""
    strategy, place = GATEWAY_FIELDS[field]
    named = field == "gateway.unit"
    install = tmp_path / "smg"
    (install / "venv/bin").mkdir(parents=True)
    for program in ("smg", "python"):  # with gateway.api_key, its launcher runs the venv's python
        (install / "venv/bin" / program).symlink_to(sys.executable)
    units = Units()

    @PROFILE
    @given(value=strategy)
    def check(value):
        try:
            gw = validate_gateway(SRC, {**place(value), "install_dir": str(install)})
        except SpecError as e:
            refused(e.problems, field)
            return
        units.add(gw.service_unit if named else None, gateway_rendered_as_declared(gw))

    check()
    systemd_accepts(units, tmp_path / "units")


@needs_systemd
def test_a_hostile_install_dir_is_refused_or_rendered_safely(tmp_path):
    units = Units()

    @PROFILE
    @given(value=text_field)
    def check(value):
        install = f"{tmp_path}/i{len(units)}/{value}x"
        try:
            gw = validate_gateway(SRC, gateway_data(install_dir=install))
        except SpecError as e:
            refused(e.problems, "gateway.install_dir")
            return
        os.makedirs(f"{install}/venv/bin")
        for program in ("smg", "python"):
            os.symlink(sys.executable, f"{install}/venv/bin/{program}")
        units.add(None, gateway_rendered_as_declared(gw))

    check()
    assert units, "no install_dir was accepted: the property was not exercised"
    systemd_accepts(units, tmp_path / "units")

"""fleet.rollout.render: the unit, the environment file and the secret files, compared exactly.

Golden unit files live in tests/unit/golden/<ALGORITHM>.service. They were written
once from the renderer and then read line by line against SGLang 0.5.23's --help
(tests/fixtures/sglang-0.5.23-help.txt). To regenerate after an intended change:
SGLANG_FLEET_UPDATE_GOLDEN=1 pytest tests/unit/test_render.py, then read the diff.

ExecStart is also read back the way systemd reads it (a small splitter below:
specifiers, line continuations, quoting with C escapes, $-expansion), so quoting
is checked by round trip, not only by string.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.spec.load import load_class_specs
from fleet.rollout.render import (
    env_quote,
    render_auth_header,
    render_config,
    render_env,
    render_secret_env,
    render_unit,
    server_argv,
    systemd_quote,
)
from fleet.spec.secrets import Secrets
from fleet.spec import ClassSpec, SecretSource

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
HELP = (ROOT / "tests" / "fixtures" / "sglang-0.5.23-help.txt").read_text()
KEY = "sk-Fleet0123456789abcdef"
ADMIN = "adm-Fleet0123456789"
FROM_ENV = {"env": "SGLANG_API_KEY_LAB"}
FROM_ENV_SOURCE = SecretSource(**FROM_ENV)
UPDATE = os.environ.get("SGLANG_FLEET_UPDATE_GOLDEN") == "1"

GPU = {"accepted_models": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], "gpu_count": 1, "min_memory_mib": 95000}
SERVICE = {
    "model_path": "/root/models/Qwen3.6-27B",
    "served_model_name": "qwen3.6-27b",
    "host": "0.0.0.0",
    "port": 30000,
    "tp_size": 1,
    "mem_fraction": 0.85,
    "context_length": 32768,
}
SPECULATIVE = {
    "none": {"algorithm": "none"},
    "EAGLE": {"algorithm": "EAGLE", "draft_model_path": "/root/models/Qwen3.6-27B-EAGLE", "num_steps": 5,
              "topk": 4, "num_draft_tokens": 8},
    "EAGLE3": {"algorithm": "EAGLE3", "draft_model_path": "/root/models/Qwen3.6-27B-EAGLE3", "num_steps": 3,
               "topk": 4, "num_draft_tokens": 8},
    "NEXTN": {"algorithm": "NEXTN", "num_steps": 3, "topk": 1, "num_draft_tokens": 4},
    "STANDALONE": {"algorithm": "STANDALONE", "draft_model_path": "/root/models/Qwen3-0.6B", "num_steps": 4,
                   "topk": 1, "num_draft_tokens": 5},
    "NGRAM": {"algorithm": "NGRAM", "num_draft_tokens": 12, "max_bfs_breadth": 8},
    "DFLASH": {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash", "block_size": 16},
    "DDTREE": {"algorithm": "DDTREE", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash", "block_size": 16,
               "tree_budget": 64},
}

HEAD = ["/opt/sglang/bin/python", "-m", "sglang.launch_server",
        "--model-path", "/root/models/Qwen3.6-27B", "--served-model-name", "qwen3.6-27b",
        "--host", "0.0.0.0", "--port", "30000", "--tp-size", "1", "--mem-fraction-static", "0.85",
        "--context-length", "32768", "--enable-metrics"]

# What each algorithm must put after HEAD, spelt as SGLang 0.5.23 spells it (DDTREE: PR 29907).
TAIL = {
    "none": [],
    "EAGLE": ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/root/models/Qwen3.6-27B-EAGLE",
              "--speculative-num-steps", "5", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
    "EAGLE3": ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
               "/root/models/Qwen3.6-27B-EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
               "--speculative-num-draft-tokens", "8"],
    "NEXTN": ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", "4"],
    "STANDALONE": ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                   "/root/models/Qwen3-0.6B", "--speculative-num-steps", "4", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "5"],
    "NGRAM": ["--speculative-algorithm", "NGRAM", "--speculative-ngram-max-bfs-breadth", "8",
              "--speculative-num-draft-tokens", "12"],
    "DFLASH": ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
               "/root/models/Qwen3.6-27B-DFlash", "--speculative-dflash-block-size", "16"],
    "DDTREE": ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path",
               "/root/models/Qwen3.6-27B-DFlash", "--speculative-dflash-block-size", "16",
               "--speculative-ddtree-budget", "64"],
}


def make_spec(speculative: dict | None = None, **service) -> ClassSpec:
    return ClassSpec.model_validate(
        {"gpu_class": GPU, "service": {**SERVICE, **service}, "speculative": speculative or {"algorithm": "none"}}
    )


# --- systemd, as far as ExecStart= and EnvironmentFile= need it --------------------

_CESC = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"',
         "'": "'", "s": " "}


def unit_lines(unit: str) -> dict[str, list[str]]:
    """KEY -> values, with systemd's continuation: a trailing backslash joins the next line with a space."""
    out: dict[str, list[str]] = {}
    logical = ""
    for raw in unit.split("\n"):
        if raw.endswith("\\"):
            logical += raw[:-1] + " "
            continue
        logical += raw
        line, logical = logical, ""
        if not line.strip() or line.lstrip().startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def systemd_split(rvalue: str, env: dict[str, str] | None = None) -> list[str]:
    """An ExecStart= value read back as systemd does: specifiers first (only %% allowed here),
    then words with quotes and C escapes, then $$ and ${VAR} / $VAR in each word."""
    # 1. specifiers: %% -> %; any other specifier would be expanded by systemd: refuse it here.
    out, i = [], 0
    while i < len(rvalue):
        c = rvalue[i]
        if c == "%":
            assert rvalue[i + 1: i + 2] == "%", f"unescaped specifier in {rvalue!r}"
            out.append("%")
            i += 2
            continue
        out.append(c)
        i += 1
    text = "".join(out)
    # 2. words (extract_first_word with EXTRACT_UNQUOTE | EXTRACT_CUNESCAPE)
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            break
        word, quote = [], None
        while i < n:
            c = text[i]
            if quote is None and c in " \t":
                break
            if c == "\\":
                nxt = text[i + 1]
                assert nxt in _CESC, f"unknown escape \\{nxt} in {rvalue!r}"
                word.append(_CESC[nxt])
                i += 2
                continue
            if quote is None and c in "\"'":
                quote = c
            elif c == quote:
                quote = None
            else:
                word.append(c)
            i += 1
        assert quote is None, f"unterminated quote in {rvalue!r}"
        words.append("".join(word))
    # 3. environment: $$ -> $, ${VAR} -> value, bare $VAR word -> split value
    env = env or {}
    argv: list[str] = []
    for w in words:
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            argv += env.get(m.group(1), "").split()
            continue
        res, j = [], 0
        while j < len(w):
            if w.startswith("$$", j):
                res.append("$")
                j += 2
            elif w.startswith("${", j):
                end = w.index("}", j)
                res.append(env.get(w[j + 2: end], ""))
                j = end + 1
            else:
                res.append(w[j])
                j += 1
        argv.append("".join(res))
    return argv


def parse_env_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= reading of KEY="value" lines (shell-like double quotes)."""
    env = {}
    for line in text.splitlines():
        if not line or line.startswith(("#", ";")):
            continue
        key, _, value = line.partition("=")
        assert value.startswith('"') and value.endswith('"'), f"unquoted value in {line!r}"
        body, res, i = value[1:-1], [], 0
        while i < len(body):
            c = body[i]
            if c == "\\" and i + 1 < len(body) and body[i + 1] in '"\\`$':
                res.append(body[i + 1])
                i += 2
                continue
            assert c != '"', f"unescaped quote in {line!r}"
            res.append(c)
            i += 1
        env[key] = "".join(res)
    return env


def exec_start(unit: str) -> str:
    (value,) = unit_lines(unit)["ExecStart"]
    return value


# --- golden units ------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", list(SPECULATIVE))
def test_golden_unit(algorithm):
    unit = render_unit(make_spec(SPECULATIVE[algorithm]), "lab", False)
    path = GOLDEN / f"{algorithm}.service"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(unit)
    assert unit == path.read_text()


@pytest.mark.parametrize("algorithm", list(SPECULATIVE))
def test_golden_argv(algorithm):
    """The golden files' ExecStart, read back as systemd does, is exactly HEAD + TAIL."""
    golden = (GOLDEN / f"{algorithm}.service").read_text()
    assert systemd_split(exec_start(golden)) == HEAD + TAIL[algorithm]
    assert server_argv(make_spec(SPECULATIVE[algorithm])) == HEAD + TAIL[algorithm]
    assert f"Description=SGLang qwen3.6-27b (speculative: {algorithm})" in golden


@pytest.mark.parametrize("algorithm", [a for a in SPECULATIVE if a != "DDTREE"])
def test_every_flag_exists_in_sglang_0523(algorithm):
    argv = server_argv(make_spec(SPECULATIVE[algorithm]))
    flags = [t for t in argv if t.startswith("--")]
    for flag in flags:
        assert re.search(rf"^\s+{re.escape(flag)}[ ,\n]", HELP, re.M), f"{flag} is not an SGLang 0.5.23 flag"
    if algorithm != "none":
        builtins = re.search(r"Builtins: ([A-Z0-9, \n]+?)\. Or", HELP).group(1)
        assert algorithm in [b.strip() for b in builtins.replace("\n", " ").split(",")]


def test_ddtree_is_never_served_as_dflash():
    argv = server_argv(make_spec(SPECULATIVE["DDTREE"]))
    i = argv.index("--speculative-algorithm")
    assert argv[i + 1] == "DDTREE"
    assert argv.count("--speculative-algorithm") == 1
    assert "DFLASH" not in argv
    assert argv[argv.index("--speculative-ddtree-budget") + 1] == "64"
    unit = render_unit(make_spec(SPECULATIVE["DDTREE"]), "lab", False)
    assert "--speculative-algorithm DFLASH" not in unit
    # the other flags DDTREE uses do exist in 0.5.23; only the budget is PR 29907's
    others = [t for t in argv if t.startswith("--") and t != "--speculative-ddtree-budget"]
    for flag in others:
        assert re.search(rf"^\s+{re.escape(flag)}[ ,\n]", HELP, re.M), flag
    assert "--speculative-ddtree-budget" not in HELP
    assert "DDTREE" not in HELP


def test_dflash_tail_exact():
    argv = server_argv(make_spec(SPECULATIVE["DFLASH"]))
    assert argv[-6:] == ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                         "/root/models/Qwen3.6-27B-DFlash", "--speculative-dflash-block-size", "16"]


def test_ngram_breadth_is_not_eagle_topk():
    # SGLang sets eagle_topk from --speculative-ngram-max-bfs-breadth for NGRAM, overriding --speculative-eagle-topk
    argv = server_argv(make_spec({"algorithm": "NGRAM", "max_bfs_breadth": 3}))
    assert argv[argv.index("--speculative-ngram-max-bfs-breadth") + 1] == "3"
    assert "--speculative-eagle-topk" not in argv
    assert "--speculative-num-draft-tokens" not in server_argv(make_spec({"algorithm": "NGRAM"}))


# --- the seed case, from the shipped group_data -------------------------------------

SEED_EXEC_START = (
    "/opt/sglang/bin/python -m sglang.launch_server \\\n"
    "    --model-path /root/models/Qwen3.6-27B \\\n"
    "    --served-model-name qwen3.6-27b \\\n"
    "    --host 0.0.0.0 \\\n"
    "    --port 30000 \\\n"
    "    --tp-size 1 \\\n"
    "    --mem-fraction-static 0.85 \\\n"
    "    --context-length 32768 \\\n"
    "    --enable-metrics \\\n"
    "    --speculative-algorithm DFLASH \\\n"
    "    --speculative-draft-model-path /root/models/Qwen3.6-27B-DFlash \\\n"
    "    --speculative-dflash-block-size 16\n"
)


def test_seed_case_exec_start_exact():
    spec = load_class_specs(ROOT / "group_data")["pro6000"]
    unit = render_unit(spec, "pro6000", False)
    assert "\nExecStart=" + SEED_EXEC_START in unit
    assert unit.startswith("# Managed by sglang-fleet from group_data/pro6000.py")
    assert systemd_split(exec_start(unit)) == HEAD + TAIL["DFLASH"]
    assert unit == (GOLDEN / "DFLASH.service").read_text().replace("group_data/lab.py", "group_data/pro6000.py")


def test_unit_sections():
    lines = unit_lines(render_unit(make_spec(), "lab", False))
    assert lines["Type"] == ["simple"]
    assert lines["Restart"] == ["on-failure"]
    assert lines["EnvironmentFile"] == ["/etc/sglang/sglang.env"]
    assert lines["WantedBy"] == ["multi-user.target"]
    assert lines["After"] == ["network-online.target"]


def test_stop_drains_the_server_and_crashes_give_up():
    """SIGTERM to the server only (its schedulers have no handler: SGLang drains, then stops them);
    a server that keeps crashing stays failed after restarts_on_crash restarts, each a full load."""
    lines = unit_lines(render_unit(make_spec(), "lab", False))
    assert lines["KillMode"] == ["mixed"] and lines["TimeoutStopSec"] == ["120s"] and lines["RestartSec"] == ["10s"]
    assert lines["StartLimitBurst"] == ["3"] and lines["StartLimitIntervalSec"] == [f"{3 * (1200 + 10)}s"]
    spec = make_spec(drain_timeout_s=30.5, restarts_on_crash=0)
    spec = spec.model_copy(update={"readiness": spec.readiness.model_copy(update={"load_timeout_s": 90})})
    lines = unit_lines(render_unit(spec, "lab", False))
    assert lines["TimeoutStopSec"] == ["30.5s"] and lines["StartLimitBurst"] == ["1"]
    assert lines["StartLimitIntervalSec"] == ["100s"]
    # the start limit belongs to [Unit]: systemd ignores it in [Service]
    unit = render_unit(make_spec(), "lab", False)
    assert unit.index("StartLimitBurst=") < unit.index("[Service]") < unit.index("KillMode=")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd here")  # allowed: CI (Debian) has it
@pytest.mark.parametrize("algorithm", list(SPECULATIVE))
def test_systemd_itself_accepts_the_rendered_unit(algorithm, tmp_path):
    """`systemd-analyze verify` reads the unit as systemd would (the launcher must exist: a local one)."""
    spec = make_spec(SPECULATIVE[algorithm], api_key=FROM_ENV, launcher=sys.executable)
    path = tmp_path / "sglang.service"
    path.write_text(render_unit(spec, "lab", False))
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    # and it does complain, about a bad setting
    path.write_text(render_unit(spec, "lab", False).replace("KillMode=mixed", "KillMode=gently"))
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert "Failed to parse kill mode" in r.stderr


# --- secrets --------------------------------------------------------------------------

SECRETS = Secrets({"api-key": KEY, "admin-api-key": ADMIN}, {"HF_TOKEN": "hf_abc$1 \"x\""})


def test_keys_reach_the_server_through_its_0600_config_never_its_arguments():
    spec = make_spec(SPECULATIVE["DFLASH"], api_key=FROM_ENV, admin_api_key={"file": "~/admin.key"})
    unit = render_unit(spec, "lab", False)
    assert KEY not in unit and ADMIN not in unit and KEY not in render_env(spec)
    argv = server_argv(spec)
    assert systemd_split(exec_start(unit)) == argv
    assert argv[argv.index("--config") + 1] == "/etc/sglang/sglang.yaml"
    assert not {"--api-key", "--admin-api-key"} & set(argv)
    assert argv[-6:] == TAIL["DFLASH"]
    assert render_config(spec, SECRETS) == (
        "# Managed by sglang-fleet: the secret arguments of sglang.service (0600, root only).\n"
        f'api-key: "{KEY}"\nadmin-api-key: "{ADMIN}"\n')
    assert render_auth_header(spec, SECRETS) == f"Authorization: Bearer {KEY}\n"
    assert unit_lines(unit)["EnvironmentFile"] == ["/etc/sglang/sglang.env"]  # no secret environment declared
    assert render_secret_env(spec, SECRETS) is None


@pytest.mark.parametrize("key", [KEY, "abc.DEF_~+/=-12", "x" * 64, "1e10abcd", "12345678", "true1234"])
def test_the_config_file_reads_back_the_key_as_the_same_string(key):
    """SGLang reads --config with yaml.safe_load, then str() of each value: a number or a bool
    would come back as another string."""
    import yaml
    spec = make_spec(api_key=FROM_ENV)
    assert yaml.safe_load(render_config(spec, Secrets({"api-key": key}))) == {"api-key": key}


def test_secret_environment_goes_to_its_own_0600_file_the_unit_reads():
    spec = make_spec(secret_environment={"HF_TOKEN": {"env": "HF_TOKEN"}}, environment={"NCCL_DEBUG": "WARN"})
    unit = render_unit(spec, "lab", False)
    assert unit_lines(unit)["EnvironmentFile"] == ["/etc/sglang/sglang.env", "/etc/sglang/sglang.secret"]
    assert "hf_abc" not in render_env(spec) and "HF_TOKEN" not in render_env(spec)
    assert parse_env_file(render_secret_env(spec, SECRETS)) == {"HF_TOKEN": 'hf_abc$1 "x"'}
    assert "--config" not in server_argv(spec) and render_config(spec, SECRETS) is None
    assert render_auth_header(spec, SECRETS) is None


def test_no_secret_declared_no_secret_file():
    spec = make_spec()
    assert (render_config(spec, Secrets()), render_secret_env(spec, Secrets()), render_auth_header(spec, Secrets())) \
        == (None, None, None)
    unit = render_unit(spec, "lab", True)
    assert "--config" not in unit and "secret" not in unit and "LogFilterPatterns" not in unit


def test_a_key_with_a_final_newline_never_reaches_the_config_file():
    """A variable set with `$(cat key)` or echo keeps its newline: in the YAML it would become a space."""
    from fleet.spec.secrets import SecretError, read_key

    with pytest.raises(SecretError, match="is not a usable key"):
        read_key(FROM_ENV_SOURCE, "group_data/x.py", "service.api_key", {"SGLANG_API_KEY_LAB": KEY + "\n"})
    assert read_key(FROM_ENV_SOURCE, "group_data/x.py", "service.api_key", {"SGLANG_API_KEY_LAB": KEY}) == KEY


def test_a_declared_secret_that_was_not_read_is_never_rendered_as_absent():
    spec = make_spec(api_key=FROM_ENV)
    with pytest.raises(ValueError, match="declared but not read: api-key"):
        render_config(spec, Secrets())


def test_the_journal_filter_is_rendered_only_where_systemd_has_it_and_a_key_is_declared():
    spec = make_spec(api_key=FROM_ENV)
    assert unit_lines(render_unit(spec, "lab", True))["LogFilterPatterns"] == ["~server_args="]
    assert "LogFilterPatterns" not in render_unit(spec, "lab", False)
    assert "LogFilterPatterns" not in render_unit(make_spec(), "lab", True)


def test_the_journal_filter_drops_sglangs_server_args_line_only():
    """The pattern is an extended regex matched against each message (systemd.exec(5))."""
    pattern = unit_lines(render_unit(make_spec(api_key=FROM_ENV), "lab", True))["LogFilterPatterns"][0]
    assert pattern.startswith("~")  # ~: drop what matches
    drop = re.compile(pattern[1:])
    assert drop.search(f"[2026-11-30 12:00:00] server_args=ServerArgs(model_path='/m', api_key='{KEY}')")
    assert not drop.search("[2026-11-30 12:00:00] Load weight end. type=Qwen3ForCausalLM")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd here")  # allowed: CI (Debian) has it
def test_systemd_reads_the_journal_filter_or_names_it_unknown(tmp_path):
    """systemd >= 253 accepts the setting; older systemd (Debian 12 has 252) only warns that it does
    not know it, which is why preflight renders it for new systemd only."""
    version = int(re.match(r"systemd (\d+)", subprocess.run(["systemctl", "--version"], capture_output=True,
                                                             text=True).stdout).group(1))
    path = tmp_path / "sglang.service"
    path.write_text(render_unit(make_spec(api_key=FROM_ENV, launcher=sys.executable), "lab", True))
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    if version >= 253:
        assert (r.returncode, r.stderr) == (0, "")
    else:
        assert [line.split(": ", 1)[1] for line in r.stderr.splitlines()] == \
            ["Unknown key 'LogFilterPatterns' in section [Service], ignoring."]


# --- quoting -----------------------------------------------------------------------

@pytest.mark.parametrize(
    "token, quoted",
    [
        ("/root/models/Qwen3.6-27B", "/root/models/Qwen3.6-27B"),
        ("--json-model-override-args={\"a\":1}", '"--json-model-override-args={\\"a\\":1}"'),
        ("my model", '"my model"'),
        ("50%", "\"50%%\""),
        ("100% sure", '"100%% sure"'),
        ("$HOME", '"$$HOME"'),
        ("${SGLANG_API_KEY}", '"$${SGLANG_API_KEY}"'),
        ("it's", "\"it's\""),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("a;b", '"a;b"'),
        (";", '";"'),
        ("", '""'),
    ],
)
def test_systemd_quote_exact(token, quoted):
    assert systemd_quote(token) == quoted


ODD_TOKENS = ["my model", "50%", "100% sure %n", "$HOME", "${HOME}", "$$", "it's", 'say "hi"', "back\\slash",
              "a;b", ";", "tab\there", "two\nlines", "{\"k\": [1, 2]}", "--x=a b", "'", '"', "\\", "%%", "é-ünïcode",
              "final-newline\n"]


@pytest.mark.parametrize("token", ODD_TOKENS)
def test_systemd_quote_round_trips(token):
    assert systemd_split(systemd_quote(token), {"HOME": "/root"}) == [token]


def test_extra_args_round_trip_through_the_unit():
    extra = ["--chat-template", "/etc/sglang/tpl with space.jinja", "--json-model-override-args",
             '{"rope_scaling": {"type": "yarn", "factor": 4.0}}', "--log-level", "info", "--note=50%$x"]
    spec = make_spec(SPECULATIVE["DFLASH"], extra_args=extra, served_model_name="qwen 3.6 (27b)")
    argv = systemd_split(exec_start(render_unit(spec, "lab", False)))
    assert argv == server_argv(spec)
    assert argv[-len(extra):] == extra
    assert argv[argv.index("--served-model-name") + 1] == "qwen 3.6 (27b)"


def test_systemd_quote_newline_stays_on_one_line():
    """The spec refuses a newline in any argument; were one to get through, it stays in its argument."""
    from pydantic import ValidationError

    assert systemd_quote("two\nlines") == '"two\\nlines"'
    assert systemd_split(systemd_quote("a\nExecStartPre=/bin/false")) == ["a\nExecStartPre=/bin/false"]
    with pytest.raises(ValidationError, match="found a control character"):
        make_spec(extra_args=["--note", "a\nExecStartPre=/bin/false"])


@pytest.mark.parametrize("algorithm", list(SPECULATIVE))
def test_every_flag_the_unit_writes_is_one_extra_args_may_not_repeat(algorithm):
    """fleet.spec.SPEC_FLAGS is what extra_args may not say, in any spelling: every flag rendered
    must be there (or be --config, kept out the same way)."""
    from fleet.spec import CONFIG_FLAG, SPEC_FLAGS

    argv = server_argv(make_spec(SPECULATIVE[algorithm], api_key=FROM_ENV, trust_remote_code=True))
    flags = {t for t in argv if t.startswith("--")}
    assert CONFIG_FLAG in flags and flags - {CONFIG_FLAG} <= set(SPEC_FLAGS)


@pytest.mark.parametrize(
    "value, quoted",
    [("1", '"1"'), ("a b", '"a b"'), ('q"x', '"q\\"x"'), ("$HOME", '"\\$HOME"'), ("c:\\d", '"c:\\\\d"')],
)
def test_env_quote_exact(value, quoted):
    assert env_quote(value) == quoted


def test_env_file_round_trips():
    environment = {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "WARN", "SPACES": "a b  c", "QUOTES": "it's \"x\"",
                   "DOLLAR": "$HOME ${X}", "BACKSLASH": "C:\\path\\", "BACKTICK": "`id`", "EMPTY": "", "PCT": "50%"}
    spec = make_spec(environment=environment)
    text = render_env(spec)
    assert text.startswith("# Managed by sglang-fleet: environment of sglang.service. No secrets here.\n")
    assert parse_env_file(text) == environment
    assert list(parse_env_file(text)) == list(environment)  # declared order


def test_env_file_without_environment_is_only_the_header():
    assert render_env(make_spec()) == "# Managed by sglang-fleet: environment of sglang.service. No secrets here.\n"


def test_optional_flags():
    spec = make_spec(trust_remote_code=True, enable_metrics=False, context_length=None, mem_fraction=0.9, tp_size=1)
    argv = server_argv(spec)
    assert "--trust-remote-code" in argv
    assert "--enable-metrics" not in argv
    assert "--context-length" not in argv
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.9"


def test_custom_unit_name_moves_every_file():
    spec = make_spec(unit="sglang-b", api_key=FROM_ENV, secret_environment={"HF_TOKEN": {"env": "HF_TOKEN"}})
    unit = render_unit(spec, "lab", False)
    assert unit_lines(unit)["EnvironmentFile"] == ["/etc/sglang/sglang-b.env", "/etc/sglang/sglang-b.secret"]
    assert server_argv(spec)[server_argv(spec).index("--config") + 1] == "/etc/sglang/sglang-b.yaml"
    assert (spec.unit_file, spec.auth_header_file) == ("/etc/systemd/system/sglang-b.service", "/etc/sglang/sglang-b.auth")


def test_description_is_escaped():
    from pydantic import ValidationError

    try:  # refusing the newline in the spec is a fix too
        unit = render_unit(make_spec(served_model_name="a\nExecStartPre=/bin/false"), "lab", False)
        assert "ExecStartPre" not in unit_lines(unit)
    except ValidationError:
        pass
    (description,) = unit_lines(render_unit(make_spec(served_model_name="qwen-50%b"), "lab", False))["Description"]
    assert description == "SGLang qwen-50%%b (speculative: none)"

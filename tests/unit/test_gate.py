"""fleet.rollout.gate: readiness verdicts and the smoke test, over what a host answered, no hosts.

The shell commands are also run for real with `sh` (what pyinfra runs them with) against
fake `systemctl` and `curl` on PATH, so their output shape is the one the parsers read.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from fleet.rollout.gate import (
    CURL,
    OBSERVATION_MARK,
    POLL,
    WAITING,
    Observation,
    base_url,
    judge,
    judge_generation,
    local_address,
    url_host,
    parse_observation,
    parse_smoke,
    observation_text,
    observe_command,
    wait_command,
    smoke_command,
    speculation_ran,
)
from fleet.rollout.render import render_auth_header
from fleet.spec.secrets import Secrets
from fleet.spec import ClassSpec

from answers import answer, record

KEY = "sk-Fleet0123456789abcdef"
TIMEOUT = 1200.0


def make_spec(readiness=None, **service) -> ClassSpec:
    return ClassSpec.model_validate(
        {
            "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
            "service": {"model_path": "/root/models/Qwen3.6-27B", "served_model_name": "qwen3.6-27b", **service},
            "speculative": {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash"},
            "readiness": readiness or {},
        }
    )


def obs(active="active", sub="running", pid=4242, restarts=0, result="success", health=0) -> Observation:
    return Observation(active, sub, pid, restarts, result, health)


START = obs(active="activating", sub="start", pid=4242)


# --- judge -------------------------------------------------------------------------

def test_ready_on_health_200_with_unit_active():
    v = judge(START, obs(health=200), 42.0, TIMEOUT)
    assert v.done and v.ready
    assert v.reason == "/health 200 after 42.0s"
    assert v.elapsed_s == 42.0


@pytest.mark.parametrize(
    "now",
    [
        obs(health=0),            # 'active' alone: the port is not even open yet
        obs(health=503),          # /v1/models may answer already; /health does not
        obs(health=404),
        obs(active="activating", sub="start", health=200),  # not active: not ready
        obs(active="reloading", sub="running", health=200),
    ],
)
def test_not_ready_otherwise(now):
    assert judge(START, now, 10.0, TIMEOUT) == WAITING
    assert not WAITING.done and not WAITING.ready


@pytest.mark.parametrize(
    "now, words",
    [
        (obs(active="failed", sub="failed", pid=0, result="exit-code"), ["failed", "exit-code"]),
        (obs(active="inactive", sub="dead", pid=0, result="success"), ["inactive", "dead"]),
        (obs(active="activating", sub="auto-restart", pid=0, result="exit-code"), ["auto-restart"]),
        (obs(active="failed", sub="failed", pid=0, result="oom-kill", health=200), ["oom-kill"]),
    ],
)
@pytest.mark.parametrize("elapsed", [0.0, 0.5, 600.0])
def test_stopped_unit_ends_the_wait_at_once(now, words, elapsed):
    v = judge(START, now, elapsed, TIMEOUT)
    assert v.done and not v.ready
    assert v.reason.startswith("the unit stopped: ")
    for w in words:
        assert w in v.reason
    assert v.elapsed_s == elapsed


@pytest.mark.parametrize("elapsed", [0.0, 1.0, 900.0])
def test_nrestarts_increase_ends_the_wait(elapsed):
    v = judge(START, obs(restarts=1, pid=4242), elapsed, TIMEOUT)
    assert v.done and not v.ready
    assert "restarted" in v.reason and "the server died" in v.reason


@pytest.mark.parametrize("elapsed", [0.0, 1.0, 900.0])
def test_main_pid_change_ends_the_wait(elapsed):
    v = judge(START, obs(pid=5555), elapsed, TIMEOUT)
    assert v.done and not v.ready
    assert "pid 4242 -> 5555" in v.reason


def test_restart_wins_over_health_200():
    # a healthy answer from a process that replaced a crashed one is not the rollout's server
    for now in (obs(restarts=2, health=200), obs(pid=9999, health=200)):
        v = judge(START, now, 5.0, TIMEOUT)
        assert v.done and not v.ready


def test_first_pid_appearing_is_not_a_restart():
    start = obs(active="activating", sub="start", pid=0)
    assert judge(start, obs(pid=777), 3.0, TIMEOUT) == WAITING
    assert judge(start, obs(pid=777, health=200), 3.0, TIMEOUT).ready


def test_timeout():
    v = judge(START, obs(health=0), TIMEOUT, TIMEOUT)
    assert v.done and not v.ready
    assert v.reason.startswith("not ready after 1200s (load_timeout_s): ")
    assert "unit active (running), pid 4242, port closed" in v.reason
    assert judge(START, obs(health=0), TIMEOUT - 0.1, TIMEOUT) == WAITING
    assert judge(START, obs(health=503), TIMEOUT + 5, TIMEOUT).reason.endswith("/health 503")


def test_ready_just_at_timeout_counts_as_ready():
    assert judge(START, obs(health=200), TIMEOUT, TIMEOUT).ready


def test_describe():
    assert obs(health=0).describe() == "unit active (running), pid 4242, port closed"
    assert obs(pid=0, health=503).describe() == "unit active (running), pid -, /health 503"


# --- parse_observation -------------------------------------------------------------

SHOW_RUNNING = "ActiveState=active\nSubState=running\nMainPID=4242\nNRestarts=0\nResult=success\nhealth=200\n"
SHOW_FAILED = "Result=exit-code\nNRestarts=3\nMainPID=0\nActiveState=failed\nSubState=failed\nhealth=000\n"


def test_parse_observation_running():
    assert parse_observation(SHOW_RUNNING) == Observation("active", "running", 4242, 0, "success", 200)


def test_parse_observation_any_order_and_000():
    o = parse_observation(SHOW_FAILED)
    assert o == Observation("failed", "failed", 0, 3, "exit-code", 0)
    assert o.describe() == "unit failed (failed), pid -, port closed"


@pytest.mark.parametrize("text", ["", "health=\n", "Failed to connect to bus\nhealth=000\n", "health=abc\n"])
def test_parse_observation_garbage_is_unknown_and_closed(text):
    o = parse_observation(text)
    assert o.health == 0
    assert o.main_pid == 0 and o.n_restarts == 0
    assert o.active_state == "unknown"
    # and unknown never counts as ready
    assert not judge(START, o, 1.0, TIMEOUT).ready


def test_parse_observation_empty_values():
    o = parse_observation("ActiveState=activating\nSubState=start\nMainPID=\nNRestarts=\nResult=\nhealth=000")
    assert o == Observation("activating", "start", 0, 0, "", 0)


# --- poll_command, run for real --------------------------------------------------

@pytest.mark.parametrize(
    "host, address",
    [("0.0.0.0", "127.0.0.1"), ("127.0.0.1", "127.0.0.1"), ("10.1.2.3", "10.1.2.3"),
     ("::", "[::1]"), ("fd00::5", "[fd00::5]")],
)
def test_local_address(host, address):
    spec = make_spec(host=host, port=30123)
    assert local_address(host) == address
    assert base_url(spec) == f"http://{address}:30123"


@pytest.mark.parametrize("address, shown", [("10.0.0.5", "10.0.0.5"), ("gpu-1.fleet", "gpu-1.fleet"),
                                            ("fd00::5", "[fd00::5]")])
def test_a_replicas_address_in_a_url(address, shown):
    # the gateway reaches a replica at its ssh_hostname: an IPv6 one must be bracketed in the URL
    assert url_host(address) == shown


def test_observe_command_shape():
    """fleet/programs/gate.sh, sent whole in a subshell, its arguments the positional parameters."""
    cmd = observe_command(make_spec(host="0.0.0.0", port=30001))
    assert cmd == f"( set -- observe sglang.service http://127.0.0.1:30001/health\n{POLL}\n)"
    assert "systemctl show -p ActiveState,SubState,MainPID,NRestarts,Result" in POLL
    assert f"printf '{OBSERVATION_MARK}\\n%s\\n'" in POLL  # the mark the controller reads after
    assert "0.0.0.0" not in cmd
    assert "/v1/models" not in cmd
    wait = wait_command(make_spec(readiness={"poll_interval_s": 0.25}), "health=000\nprobe=7", 2.5)
    assert wait.startswith("( set -- wait sglang.service http://127.0.0.1:30000/health 'health=000\nprobe=7' 3 0.25\n")


def fake_bin(tmp_path: Path, scripts: dict[str, str]) -> dict[str, str]:
    b = tmp_path / "bin"
    b.mkdir(exist_ok=True)
    for name, body in scripts.items():
        p = b / name
        p.write_text("#!/bin/sh\n" + body)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{b}:{os.environ['PATH']}"}


def unit_and_health(tmp_path: Path, codes: list[str]) -> dict[str, str]:
    """systemctl: the unit running; curl: the next of `codes` on each call (the last one repeats)."""
    log, left = tmp_path / "log", tmp_path / "codes"
    left.write_text("\n".join(codes) + "\n")
    return fake_bin(tmp_path, {
        "systemctl": f'echo "systemctl $*" >> {log}\n'
                     'printf "ActiveState=active\\nSubState=running\\nMainPID=4242\\nNRestarts=1\\nResult=success\\n"\n',
        # curl -w '%{http_code}' prints the code (000 when nothing answered)
        "curl": f'echo "curl $*" >> {log}\ncode=$(head -n 1 {left}); '
                f'[ $(wc -l < {left}) -gt 1 ] && sed -i 1d {left}; printf "$code"\n',
    })


@pytest.mark.parametrize("code, expected", [("200", 200), ("000", 0), ("503", 503)])
def test_observe_command_output_parses(tmp_path, code, expected):
    env = unit_and_health(tmp_path, [code])
    spec = make_spec(host="0.0.0.0", port=30001)
    out = subprocess.run(["sh", "-c", f"echo noise; {observe_command(spec)}"], env=env, capture_output=True,
                         text=True).stdout
    assert parse_observation(out) == Observation("active", "running", 4242, 1, "success", expected)
    calls = (tmp_path / "log").read_text()
    assert "systemctl show -p ActiveState,SubState,MainPID,NRestarts,Result -- sglang.service" in calls
    assert "-w %{http_code}" in calls and "http://127.0.0.1:30001/health" in calls


def test_a_host_without_curl_ends_the_wait_at_once_naming_curl(tmp_path):
    """Not "/health not ready" until the load timeout: the probe that cannot run is an error."""
    env = fake_bin(tmp_path, {"systemctl": 'printf "ActiveState=active\\nSubState=running\\nMainPID=42\\n"\n'})
    env["PATH"] = f"{tmp_path / 'bin'}:/usr/bin/no-such-dir"
    for tool in ("printf", "sh"):
        assert not (tmp_path / "bin" / tool).exists()
    out = subprocess.run(["/bin/sh", "-c", observe_command(make_spec())], env=env, capture_output=True,
                         text=True).stdout
    now = parse_observation(out)
    assert now.probe == 127
    verdict = judge(now, now, 1.0, 600)
    assert verdict.done and not verdict.ready and "curl did not run on the host (exit 127: not found)" in verdict.reason


def test_a_port_still_closed_ends_no_command_run_under_set_e(tmp_path):
    """The restart runs `set -e` then the observation: curl's exit 7 (nothing listening) is an observation."""
    env = unit_and_health(tmp_path, ["000"])
    with open(tmp_path / "bin" / "curl", "a") as f:
        f.write("exit 7\n")
    out = subprocess.run(["sh", "-c", f"set -e; true; {observe_command(make_spec())}"], env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0
    assert (parse_observation(out.stdout).health, parse_observation(out.stdout).probe) == (0, 7)


def test_wait_command_returns_at_the_first_change_of_state(tmp_path):
    """The host polls; the controller hears once per change: 000, 000, 000, 503 -> one command."""
    env = unit_and_health(tmp_path, ["000", "000", "000", "503", "200"])
    spec = make_spec(readiness={"poll_interval_s": 0.05})
    first = subprocess.run(["sh", "-c", observe_command(spec)], env=env, capture_output=True, text=True).stdout
    out = subprocess.run(["sh", "-c", wait_command(spec, observation_text(first), 30)], env=env,
                         capture_output=True, text=True).stdout
    assert parse_observation(out).health == 503
    assert (tmp_path / "log").read_text().count("curl") == 4


def test_wait_command_returns_when_its_budget_is_spent(tmp_path):
    env = unit_and_health(tmp_path, ["000"])
    spec = make_spec(readiness={"poll_interval_s": 0.2})
    first = observation_text(subprocess.run(["sh", "-c", observe_command(spec)], env=env, capture_output=True,
                                            text=True).stdout)
    out = subprocess.run(["sh", "-c", wait_command(spec, first, 1)], env=env, capture_output=True, text=True,
                         timeout=30).stdout
    assert observation_text(out) == first  # nothing changed: the same observation, after about a second


# --- parse_smoke -------------------------------------------------------------------

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "qwen3.6-27b",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there, friend!"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 14, "completion_tokens": 5, "total_tokens": 19},
}
INFO = {"version": "0.5.23", "internal_states": [{"avg_spec_accept_length": 3.25, "last_gen_throughput": 90.1}]}


def smoke_out(body, http="200", time_s="0.250000", info=None) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    info_text = info if isinstance(info, str) else json.dumps(INFO if info is None else info)
    return answer(record("chat", f"{text}\nhttp={http} time={time_s}\n", "0"), record("server-info", info_text))


def test_parse_smoke_ok():
    r = parse_smoke(smoke_out(CHAT))
    assert r.ok and r.reason == "ok"
    assert r.text == "Hello there, friend!"
    assert r.completion_tokens == 5
    assert r.latency_s == 0.25
    assert r.tokens_per_s == 20.0
    assert r.accept_length == 3.25
    assert r.summary() == "250 ms, 20.0 tok/s, accept length 3.25"


def test_parse_smoke_pretty_printed_body():
    assert parse_smoke(smoke_out(json.dumps(CHAT, indent=2))).ok


@pytest.mark.parametrize("content", ["", "   \n", None])
def test_parse_smoke_empty_text_fails(content):
    body = json.loads(json.dumps(CHAT))
    body["choices"][0]["message"]["content"] = content
    r = parse_smoke(smoke_out(body))
    assert not r.ok
    assert r.reason == "chat completion returned no text (5 completion tokens)"
    assert r.summary() == "FAILED: chat completion returned no text (5 completion tokens)"


def test_a_reasoning_model_still_thinking_passes_and_says_so():
    """Qwen3 with --reasoning-parser qwen3: a 16-token reply is all reasoning, content null."""
    body = json.loads(json.dumps(CHAT))
    body["choices"][0]["message"] = {"role": "assistant", "content": None,
                                     "reasoning_content": "Okay, the user wants a greeting."}
    r = parse_smoke(smoke_out(body))
    assert r.ok and r.reasoning_only and r.text == "Okay, the user wants a greeting."
    assert r.summary() == "250 ms, 20.0 tok/s, accept length 3.25, reasoning only"


def test_text_without_completion_tokens_fails():
    body = json.loads(json.dumps(CHAT))
    body["usage"]["completion_tokens"] = 0
    assert parse_smoke(smoke_out(body)).reason == "chat completion returned no text (0 completion tokens)"


@pytest.mark.parametrize("http", ["401", "500", "404"])
def test_parse_smoke_non_200_fails(http):
    r = parse_smoke(smoke_out('{"error": {"message": "Invalid API Key"}}', http=http))
    assert not r.ok
    assert r.reason.startswith(f"chat completion answered HTTP {http}: ")
    assert "Invalid API Key" in r.reason


def test_parse_smoke_nothing_fails():
    for out in ("", "\n", answer(record("server-info", "{}"))):
        r = parse_smoke(out)
        assert not r.ok and r.reason == "chat completion got no answer (nothing)"


@pytest.mark.parametrize("rc, said", [("28", "curl exit 28: timed out"),
                                      ("52", "curl exit 52: the connection closed without an answer"),
                                      ("7", "curl exit 7: connection refused"), ("3", "curl exit 3")])
def test_no_answer_says_what_curl_met(rc, said):
    """A hung generation: curl's --max-time ends it (28, http_code 000), or the server closes it unanswered (52)."""
    r = parse_smoke(answer(record("chat", "curl: (28) Operation timed out\nhttp=000 time=5.001\n", rc),
                           record("server-info", json.dumps(INFO))))
    assert not r.ok and r.reason == f"chat completion got no answer ({said})"


@pytest.mark.parametrize(
    "body",
    ["<html>502 Bad Gateway</html>", "not json", '{"choices": []}', '{"object": "error"}', "[]",
     '{"choices": [{"message": {}}]}'],
)
def test_parse_smoke_non_openai_json_fails(body):
    r = parse_smoke(smoke_out(body))
    assert not r.ok
    assert r.reason.startswith("chat completion is not OpenAI-shaped JSON")


@pytest.mark.parametrize(
    "info",
    ["curl: (7) Failed to connect", "", json.dumps({"internal_states": []}),
     json.dumps({"internal_states": [{"avg_spec_accept_length": None}]}), json.dumps({"version": "x"}),
     json.dumps([1, 2])],
)
def test_parse_smoke_without_accept_length_still_ok(info):
    r = parse_smoke(smoke_out(CHAT, info=info))
    assert r.ok and r.accept_length is None
    assert r.summary() == "250 ms, 20.0 tok/s"


def test_parse_smoke_accept_length_first_reporting_state():
    info = {"internal_states": [{"avg_spec_accept_length": None}, {"avg_spec_accept_length": 2.5}]}
    assert parse_smoke(smoke_out(CHAT, info=info)).accept_length == 2.5


def test_parse_smoke_zero_latency():
    r = parse_smoke(smoke_out(CHAT, time_s="0"))
    assert r.ok and r.tokens_per_s == 0.0


# --- smoke_command ---------------------------------------------------------------

KEYED = {"api_key": {"env": "SGLANG_API_KEY_TEST"}}


def test_smoke_command_never_holds_the_key():
    spec = make_spec(host="0.0.0.0", **KEYED)
    cmd = smoke_command(spec)
    assert "http://127.0.0.1:30000/v1/chat/completions" in cmd
    assert "http://127.0.0.1:30000/server_info" in cmd
    # SGLang 0.5.23 wants the key on every path but /health*, /ready*, /metrics*: /server_info too (and the
    # verify counter's two reads of /metrics, which do not need it, carry it: no harm)
    assert cmd.count("-H @/etc/sglang/sglang.auth ") == 4


def test_smoke_command_without_key_sends_no_auth():
    cmd = smoke_command(make_spec())
    assert "Authorization" not in cmd and "sglang.auth" not in cmd


def test_smoke_command_runs_and_parses(tmp_path):
    """Run it with sh against a fake curl: the key goes from the 0600 header file to the request,
    never through an argument, and /server_info's keys are blanked before they leave the host."""
    spec = make_spec(host="0.0.0.0", port=30007, **KEYED)
    etc = tmp_path / "etc"
    (etc / "sglang").mkdir(parents=True)
    (etc / "sglang" / "sglang.auth").write_text(render_auth_header(spec, Secrets({"api-key": KEY})))
    cmd = smoke_command(spec).replace("/etc/sglang/", f"{etc}/sglang/")
    args_log = tmp_path / "args"
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(CHAT))
    info = tmp_path / "info.json"
    info.write_text(json.dumps({**INFO, "api_key": KEY, "admin_api_key": KEY}))
    env = fake_bin(tmp_path, {
        # as curl: `-H @file` sends the file's lines as headers
        "curl": f'for a in "$@"; do case "$prev" in -H) case "$a" in @*) cat "${{a#@}}";; *) printf "%s\\n" "$a";; '
                f'esac;; --data-binary) cat; echo;; *) printf "%s\\n" "$a";; esac; prev="$a"; done >> {args_log}; '
                f'echo ---- >> {args_log}\n'
                'for a in "$@"; do last="$a"; done\n'
                f'case "$last" in\n'
                f'  */v1/chat/completions) cat {chat}; printf "\\nhttp=200 time=0.500000\\n" ;;\n'
                f'  */server_info) cat {info} ;;\n'
                f'  */metrics) n=$(cat {tmp_path}/n 2>/dev/null || echo 40); echo $((n + 7)) > {tmp_path}/n; '
                'printf "# TYPE sglang:spec_verify_calls_total counter\\nsglang:spec_verify_calls_total{model_name=\\"q\\"} %s\\n'
                'sglang:spec_verify_calls_totalx 1\\n" "$n" ;;\n'
                'esac\n',
    })
    out = subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert KEY not in cmd and KEY not in out.stdout
    r = parse_smoke(out.stdout)
    assert r.ok, r.reason
    assert r.text == "Hello there, friend!" and r.accept_length == 3.25 and r.tokens_per_s == 10.0
    assert (r.verify_ct, r.verify_grew) == (None, 7)  # CHAT has no meta_info; the counter read 40, then 47
    chat_args = next(c for c in args_log.read_text().split("----\n") if "--data-binary" in c).splitlines()
    assert f"Authorization: Bearer {KEY}" in chat_args
    body = json.loads(chat_args[chat_args.index("--data-binary") + 1])  # read from its stdin
    assert body == {"model": "qwen3.6-27b", "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
                    "temperature": 0, "max_tokens": 16, "return_meta_info": True}
    assert chat_args[-1] == "http://127.0.0.1:30007/v1/chat/completions"


def test_smoke_prompt_with_quotes_is_sent_intact(tmp_path):
    spec = ClassSpec.model_validate({
        **json.loads(make_spec().model_dump_json()),
        "smoke": {"prompt": "Say 'hi' and \"bye\"; $(id) `x`", "max_tokens": 4, "timeout_s": 5},
    })
    args_log = tmp_path / "args"
    env = fake_bin(tmp_path, {"curl": f'for a in "$@"; do printf "%s\\n" "$a"; [ "$a" != @- ] || {{ cat; echo; }}; '
                                      f'done >> {args_log}\n'})
    subprocess.run(["sh", "-c", smoke_command(spec)], env=env, check=True, capture_output=True)
    args = args_log.read_text().splitlines()
    body = json.loads(args[args.index("@-") + 1])
    assert body["messages"][0]["content"] == "Say 'hi' and \"bye\"; $(id) `x`"
    assert body["max_tokens"] == 4
    assert "--max-time" in args and args[args.index("--max-time") + 1] == "5"


def test_requests_to_the_local_server_ignore_the_hosts_proxy(tmp_path):
    """http_proxy in /etc/environment reaches the deploy's SSH sessions; with it, curl sends even
    127.0.0.1 to the proxy (nothing listens on port 9 here: 000). The gate's real curl does not."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = fake_bin(tmp_path, {"systemctl": 'printf "ActiveState=active\\nSubState=running\\nMainPID=1\\n"\n'})
        env.update(http_proxy="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", no_proxy="", NO_PROXY="")
        spec = make_spec(port=server.server_address[1])
        out = subprocess.run(["sh", "-c", observe_command(spec)], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert parse_observation(out.stdout).health in (200, 404)  # the server answered, not the proxy
        bare = subprocess.run(["sh", "-c", observe_command(spec).replace(CURL, "curl")], env=env,
                              capture_output=True, text=True, cwd=tmp_path)
        assert parse_observation(bare.stdout).health == 0  # what the gate saw before
    finally:
        server.shutdown()


@pytest.mark.parametrize("login", [False, True])
def test_the_longest_prompt_of_quotes_reaches_the_server_whole_under_a_sudo_user(tmp_path, login):
    """4096 quotes, as pyinfra sends the smoke under sudo (the command quoted once more for sudo's sh -c, the
    whole one argument of the login shell): no `Argument list too long`, the body arrives as written."""
    from pyinfra.api import StringCommand
    from pyinfra.connectors.util import make_unix_command

    from fleet.core import wire
    from fleet.spec.text import PROMPT_MAX

    prompt = "'" * (PROMPT_MAX // 2) + '"' * (PROMPT_MAX // 2)
    spec = ClassSpec.model_validate({**json.loads(make_spec().model_dump_json()),
                                     "smoke": {"prompt": prompt, "max_tokens": 4, "timeout_s": 5}})
    sent = make_unix_command(StringCommand(wire.transported(smoke_command(spec))), _sudo=True, _sudo_user="svc",
                             _use_sudo_login=login).get_raw_value()
    assert len(sent.encode()) < 128 * 1024  # one argument of the login shell
    body = tmp_path / "body"
    env = fake_bin(tmp_path, {
        "sudo": 'while [ "$1" != sh ]; do shift; done; exec "$@"\n',  # as root would run it: its sh -c COMMAND
        "curl": f'for a in "$@"; do [ "$a" != @- ] || cat > {body}; done\n'})
    done = subprocess.run(["sh", "-c", sent], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Argument list too long" not in done.stdout + done.stderr, done.stderr
    assert json.loads(body.read_text())["messages"][0]["content"] == prompt


# --- the gate's last step: the generation, judged ----------------------------------

def chat_with(verify_ct=None, tokens=5) -> dict:
    body = json.loads(json.dumps(CHAT))
    body["usage"]["completion_tokens"] = tokens
    if verify_ct is not None:
        body["choices"][0]["meta_info"] = {"completion_tokens": tokens, "spec_verify_ct": verify_ct}
    return body


def counter(value: float | None) -> str:
    """A verify-count read as the command prints it: the read mark, then the counter's line (SGLang leaves
    the counter out until it has counted a step)."""
    return "# read\n" + (f'sglang:spec_verify_calls_total{{model_name="q"}} {value:g}\n' if value is not None else "")


def generation(body, before: str | None = None, after: str | None = None, rc: str = "0", http="200") -> str:
    reads = [record("verify-before", before)] if before is not None else []
    text = body if isinstance(body, str) else json.dumps(body)
    return answer(*reads, record("chat", f"{text}\nhttp={http} time=0.250000\n", rc),
                  *([record("verify-after", after)] if after is not None else []), record("server-info", json.dumps(INFO)))


PLAIN = ClassSpec.model_validate({**json.loads(make_spec().model_dump_json()), "speculative": {"algorithm": "none"}})


def judged(out: str, spec: ClassSpec | None = None):
    return judge_generation("gpu-1", spec or make_spec(), parse_smoke(out))


def test_a_generation_with_tokens_and_verify_steps_is_ready():
    r = judged(generation(chat_with(verify_ct=2)))
    assert r.ok and r.reason == "ok" and r.verify_ct == 2
    assert r.summary() == "250 ms, 20.0 tok/s, accept length 3.25"


def test_a_service_without_speculation_needs_tokens_only():
    assert PLAIN.speculative.algorithm == "none"
    assert judged(generation(CHAT), PLAIN).ok
    assert "verify-before" not in smoke_command(PLAIN) and "/metrics" not in smoke_command(PLAIN)


def test_no_tokens_is_not_ready_naming_the_host_and_what_was_expected():
    r = judged(generation(chat_with(verify_ct=0, tokens=0)))
    assert not r.ok
    assert r.reason == ("gpu-1: not ready: /health 200, but its generation failed: expected a chat completion with "
                        "tokens (at most smoke.max_tokens 16, within smoke.timeout_s 120s), found: chat completion "
                        "returned no text (0 completion tokens)")


@pytest.mark.parametrize("rc, said", [("28", "timed out"), ("52", "the connection closed without an answer")])
def test_a_hung_generation_is_not_ready(rc, said):
    """/health 200 and a generation that never answers (a hung scheduler): curl's --max-time, or the server
    closing the connection unanswered."""
    r = judged(generation("curl: (28) Operation timed out after 120001 milliseconds", rc=rc, http="000"))
    assert not r.ok and r.reason.startswith("gpu-1: not ready: /health 200, but its generation failed: expected ")
    assert r.reason.endswith(f"found: chat completion got no answer (curl exit {rc}: {said})")


@pytest.mark.parametrize("out, shown", [
    (generation(chat_with(verify_ct=3)), "meta_info"),
    # 0.5.23 leaves spec_verify_ct out when it is 0, an older engine gives no meta_info: the counter decides
    (generation(CHAT, counter(40), counter(42)), "counter"),
    (generation(CHAT, counter(None), counter(1)), "counter from absent"),
    (generation(chat_with(verify_ct=3), counter(None), counter(None)), "meta_info wins"),
])
def test_speculation_ran(out, shown):
    r = judged(out)
    assert r.ok, (shown, r.reason)


@pytest.mark.parametrize("out, found", [
    (generation(chat_with(verify_ct=0), counter(40), counter(40)), "spec_verify_ct 0, sglang:spec_verify_calls_total +0"),
    (generation(CHAT, counter(None), counter(None)),
     "no spec_verify_ct in its meta_info, sglang:spec_verify_calls_total +0"),
    (generation(CHAT), "no spec_verify_ct in its meta_info, sglang:spec_verify_calls_total not read "
                       "(/metrics off or not answering)"),
    (generation(CHAT, "", counter(3)), "no spec_verify_ct in its meta_info, sglang:spec_verify_calls_total not read "
                                       "(/metrics off or not answering)"),  # the first read got no answer
])
def test_speculation_that_did_not_run_is_not_ready(out, found):
    """Tokens came, at the target's bare pace: the drafter never ran. Not ready, and the reason says why."""
    r = judged(out)
    assert not r.ok
    assert r.reason == ("gpu-1: not ready: its generation made 5 tokens but DFLASH did not run: expected "
                        f"spec_verify_ct > 0 in the answer's meta_info or sglang:spec_verify_calls_total to grow, "
                        f"found {found}")
    assert r.summary() == f"FAILED: {r.reason}"


def test_speculation_ran_reads_each_source():
    assert speculation_ran(parse_smoke(generation(chat_with(verify_ct=4)))) == (True, "spec_verify_ct 4")
    assert speculation_ran(parse_smoke(generation(CHAT, counter(1), counter(9)))) == \
        (True, "no spec_verify_ct in its meta_info, sglang:spec_verify_calls_total +8")


def test_the_verify_reads_are_made_only_with_metrics_on():
    spec = make_spec()
    cmd = smoke_command(spec)
    assert cmd.index("@@verify-before") < cmd.index("@@chat") < cmd.index("@@verify-after") < cmd.index("@@server-info")
    assert "curl --noproxy '*' --globoff -sf --max-time 5 http://127.0.0.1:30000/metrics" in cmd
    off = make_spec(enable_metrics=False)
    assert "verify-before" not in smoke_command(off) and "/metrics" not in smoke_command(off)
    # then only the meta_info can prove it
    assert not judge_generation("gpu-1", off, parse_smoke(generation(CHAT))).ok
    assert judge_generation("gpu-1", off, parse_smoke(generation(chat_with(verify_ct=1)))).ok


def test_the_gate_bound_holds_the_verify_reads():
    from fleet.core import bounds

    assert bounds.smoke(make_spec()).seconds == 120 + bounds.SERVER_INFO_S + 2 * 5 + bounds.MARGIN_S
    assert bounds.smoke(PLAIN).seconds == 120 + bounds.SERVER_INFO_S + bounds.MARGIN_S
    assert bounds.smoke(make_spec()).basis == "smoke.timeout_s 120 + 10 + 2 x /metrics 5 + 30"

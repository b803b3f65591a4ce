"""The deploy against the REAL SGLang 0.5.23 server, and the SGLang double checked against it (lab/real.toml).

real-1 runs the real server on this machine's CPU (lab file key real_sglang: the project's CPU venvs bound
read-only, a tiny random Qwen3; class cpu_real says what a CPU needs through the spec's own fields); dbl-1 is
the SGLang double of the same class and served model, the second replica behind gw-1's smg; mon-1 runs
Prometheus and Alertmanager. The tests run in order on one lab and share it: each start of the real server
costs 20-80 s of imports on a busy 2-core machine, so the module starts it four times in all (the first
install, the rolling change, the crash and the rollback) and puts every other check beside one of those.

The double is held to what the real server answers: the same requests to both, and any difference the
double does not declare (lab.realsglang.DOUBLE_DELIBERATE) fails: the endpoints the deploy and the gateway
use, the metric names, types and labels our rules, make status and make tune read, /health under load, and
the SIGTERM drain (/health 503 at once, new requests still served, a stream running at the signal finished
whole, then the exit).
"""

from __future__ import annotations

import json
import re
import threading

import pytest
import requests

from lab.realsglang import DOUBLE_DELIBERATE, LAUNCHER
from ops.loadgen import Load
from tests.lab.e2e import (DOWN_FOR_S, REPO, deploy, health, lab_monitoring, main_pid, make_status, make_verify,
                           monitoring_overrides, prometheus, sh, summary_row, verify_checks, wait_for, workdir)
from tests.lab.gwlab import LOCK_FILE, passed

REAL, DOUBLE, GW, MON = "real-1", "dbl-1", "gw-1", "mon-1"
CLASS, MODEL = "cpu_real", "tiny-qwen3"
KEY = "real-e2e-key-0123456789"
ENV = {"SGLANG_FLEET_GATEWAY_KEY": KEY}
GATEWAY = f'gateway = {{**gateway, "routes": ["{CLASS}"]}}'
MONITORING = monitoring_overrides({})
# When to give up looking for what the product bounds itself (an alert's delivery, a drain's end): no timing asserted.
LOOK_S = 180
# Source of everything that reads SGLang's metrics: the names it reads are those the double must answer as the real.
# What Prometheus 2.42 (Debian 12's, the deploy's) sends for a scrape.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
READERS = ("fleet/monitoring/models.py", "fleet/monitoring/rules.py", "fleet/monitoring/config.py", "fleet/rollout/status.py",
           "fleet/tune/search.py", "tasks/rolling.py", "ops/tune.py")


@pytest.fixture(scope="module")
def real(lab_manager, tmp_path_factory):
    """The lab booted afresh and its first deploy: smg on gw-1, Prometheus on mon-1, the real server on real-1."""
    lab = lab_manager.ensure(REPO / "lab/real.toml", fresh=True)
    lab.base = workdir(tmp_path_factory.mktemp("real-base"), gateway=GATEWAY, monitoring=MONITORING)
    lab.first = deploy(lab, lab.base, env=ENV, timeout=900)
    return lab


def url(lab, host: str, path: str = "") -> str:
    return f"http://{lab.host(host).ip}:{30000 if host in (REAL, DOUBLE) else 8000}{path}"


def unit_line(lab, host: str) -> str:
    """The unit's ExecStart= line, its continuations joined."""
    unit = sh(lab, host, "cat /etc/systemd/system/sglang.service").replace("\\\n", " ")
    line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    return " ".join(line.split())


def cmdline(lab, host: str) -> str:
    return sh(lab, host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline")


def test_the_first_install_runs_the_real_server_from_the_unit(real):
    lab, run = real, real.first
    assert run.returncode == 0, run.out
    for host in (REAL, DOUBLE):
        assert "OK" in summary_row(run.out, host), run.out
    # the real program: the deploy's own unit runs `python -m sglang.launch_server` of the bound venv, with the
    # class's CPU flags and environment
    assert unit_line(lab, REAL).startswith(f"ExecStart={LAUNCHER} -m sglang.launch_server "), unit_line(lab, REAL)
    assert "--device cpu --attention-backend torch_native" in cmdline(lab, REAL)
    assert sh(lab, REAL, "tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value sglang.service)/environ | "
                         "grep -c -x -e SGLANG_USE_CPU_ENGINE=1 -e HF_HUB_OFFLINE=1") == "2"
    info = {h: requests.get(url(lab, h, "/server_info"), timeout=30).json() for h in (REAL, DOUBLE)}
    assert "lab_double" not in info[REAL] and info[DOUBLE]["lab_double"] is True
    assert requests.get(url(lab, REAL, "/v1/loads"), timeout=30).json()["version"] == "0.5.23"
    # its smoke test passed on the real model's reply
    assert "tok/s" in summary_row(run.out, REAL), run.out


def test_verify_status_and_a_second_run_against_the_real_server(real):
    lab = real
    p = make_verify(lab)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(f"[{REAL}] PASSED") >= verify_checks(), p.stdout
    st = make_status(lab)
    assert st.returncode == 0, st.stdout + st.stderr
    assert "2/2 replicas ready" in st.stdout and REAL in st.stdout, st.stdout
    # a no-op converge: nothing restarts the real server
    pid = main_pid(lab, REAL)
    again = deploy(lab, lab.base, env=ENV, timeout=900)
    assert again.returncode == 0, again.out
    assert "none (already as declared)" in summary_row(again.out, REAL), again.out
    assert main_pid(lab, REAL) == pid


def _read_names() -> set[str]:
    """Every SGLang series name our rules, make status and make tune read."""
    names = set()
    for path in READERS:
        names |= set(re.findall(r"sglang:[a-z_]+", (REPO / path).read_text()))
    return {n for n in names if not n.endswith(":")}


def _series(text: str) -> tuple[dict[str, str], dict[str, set[tuple[str, ...]]]]:
    """Prometheus text -> (family -> type, series name -> the label sets of its samples)."""
    types, labels = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            types[family] = types[family.replace(":", "_")] = kind  # OpenMetrics: `sglang:x` typed, `sglang_x` sampled
        elif line and not line.startswith("#"):
            m = re.match(r"([^{ ]+)(?:\{([^}]*)\})? ", line)
            # the label names, and the values of is_streaming (a child per value)
            keys = tuple(sorted(f"{k}={v}" if k == "is_streaming" else k
                                for k, v in re.findall(r'([a-zA-Z_]\w*)="([^"]*)"', m.group(2) or "") if k != "le"))
            labels.setdefault(m.group(1), set()).add(keys)
    return types, labels


def _type_of(types: dict[str, str], series: str) -> str | None:
    for suffix in ("", "_bucket", "_sum", "_count", "_total"):
        if suffix and not series.endswith(suffix):
            continue
        family = series[:len(series) - len(suffix)] if suffix else series
        for name in (family, family + "_total"):
            if name in types:
                return types[name]
    return None


def _differences(real_answer, double_answer, where: str) -> list[str]:
    """Keys the double answers that the real server does not (nested dicts and the first of lists)."""
    out = []
    if isinstance(real_answer, dict) and isinstance(double_answer, dict):
        for k in double_answer:
            if f"{where}.{k}" in DOUBLE_DELIBERATE:
                continue
            if k not in real_answer:
                out.append(f"{where}.{k}: the double has it, the real server not")
            else:
                out += _differences(real_answer[k], double_answer[k], f"{where}.{k}")
    elif isinstance(real_answer, list) and isinstance(double_answer, list) and real_answer and double_answer:
        out += _differences(real_answer[0], double_answer[0], f"{where}[0]")
    elif type(real_answer) is not type(double_answer) and None not in (real_answer, double_answer) and not (
            isinstance(real_answer, (int, float)) and isinstance(double_answer, (int, float))):
        out.append(f"{where}: {type(real_answer).__name__} from the real server, {type(double_answer).__name__} "
                   "from the double")
    return out


def _chat(lab, host: str, stream: bool = False, max_tokens: int = 8) -> requests.Response:
    return requests.post(url(lab, host, "/v1/chat/completions"), timeout=120, stream=stream, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": max_tokens,
        "stream": stream})


def test_the_double_answers_the_deploys_requests_as_the_real_server(real):
    lab = real
    # /health under load: 200 on both while requests run (the real one's runs a 1-token prefill each time)
    for host in (REAL, DOUBLE):
        with Load(url(lab, host), MODEL, concurrency=4, max_tokens=32) as load:
            passed(load, 2)
            during = [requests.get(url(lab, host, "/health"), timeout=30).status_code for _ in range(5)]
            passed(load, 2)
        assert load.report.failed == 0 and during == [200] * 5, (host, during, load.report.failures())
    problems = []
    for path in ("/server_info", "/get_server_info", "/v1/models", "/model_info", "/get_model_info", "/v1/loads"):
        answers = {h: requests.get(url(lab, h, path), timeout=30) for h in (REAL, DOUBLE)}
        if answers[REAL].status_code != answers[DOUBLE].status_code:
            problems.append(f"{path}: HTTP {answers[REAL].status_code} from the real server, "
                            f"{answers[DOUBLE].status_code} from the double")
            continue
        problems += _differences(answers[REAL].json(), answers[DOUBLE].json(), path.lstrip("/").replace("get_", ""))
    replies = {h: _chat(lab, h).json() for h in (REAL, DOUBLE)}
    problems += _differences(replies[REAL], replies[DOUBLE], "chat")
    streams = {}
    for host in (REAL, DOUBLE):  # a stream: SSE chunks, then [DONE]
        lines = [ln for ln in _chat(lab, host, stream=True).iter_lines(decode_unicode=True) if ln]
        assert lines[-1] == "data: [DONE]" and all(ln.startswith("data: ") for ln in lines), (host, lines[-3:])
        streams[host] = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
    for i, what in ((0, "first"), (1, "a token's"), (-1, "last")):
        chunks = [streams[h][i] for h in (REAL, DOUBLE)]
        problems += _differences(*chunks, f"stream's {what} chunk")
        deltas = [set(c["choices"][0]["delta"]) for c in chunks]
        if deltas[0] != deltas[1]:
            problems.append(f"stream's {what} chunk: delta {sorted(deltas[0])} from the real server, "
                            f"{sorted(deltas[1])} from the double")
    # /metrics, as make status and make tune ask (plain text) and as Prometheus asks (OpenMetrics first): every
    # name our code reads, of the same type and labels on both; nothing the double invents
    for accept, escaped in ((None, lambda n: n), (PROMETHEUS_ACCEPT, lambda n: n.replace(":", "_"))):
        answers = {h: requests.get(url(lab, h, "/metrics"), timeout=30, headers={"Accept": accept} if accept else {})
                   for h in (REAL, DOUBLE)}
        asked = f"metrics ({'OpenMetrics' if accept else 'text'})"
        if answers[REAL].headers["Content-Type"] != answers[DOUBLE].headers["Content-Type"]:
            problems.append(f"{asked}: Content-Type {answers[REAL].headers['Content-Type']!r} from the real server, "
                            f"{answers[DOUBLE].headers['Content-Type']!r} from the double")
        (real_types, real_series), (double_types, double_series) = (_series(answers[h].text) for h in (REAL, DOUBLE))
        verify_calls = escaped("sglang:spec_verify_calls_total")
        assert verify_calls not in real_series, "the real server counts verify calls without speculation"
        for name in sorted(map(escaped, _read_names() - {"sglang:spec_verify_calls_total"})):
            for where, series in (("real server", real_series), ("double", double_series)):
                if name not in series:
                    problems.append(f"{asked}: {name}: the {where} has no such series")
        for name, label_sets in sorted(double_series.items()):
            if name == verify_calls:
                continue  # DOUBLE_DELIBERATE["speculation"]
            if name not in real_series:
                problems.append(f"{asked}: {name}: the double has it, the real server not")
            elif _type_of(real_types, name) != _type_of(double_types, name):
                problems.append(f"{asked}: {name}: {_type_of(real_types, name)} on the real server, "
                                f"{_type_of(double_types, name)} on the double")
            elif label_sets != real_series[name]:
                problems.append(f"{asked}: {name}: labels {sorted(real_series[name])} on the real server, "
                                f"{sorted(label_sets)} on the double")
    assert not problems, "\n".join(problems)


def test_prometheus_scrapes_the_real_server_and_the_rules_evaluate_on_its_names(real):
    lab = real

    def both_up():
        targets = prometheus(lab, "/api/v1/targets?state=active")["data"]["activeTargets"]
        return {t["labels"].get("host") for t in targets if t["labels"]["job"] == "sglang" and t["health"] == "up"} \
            == {REAL, DOUBLE}
    wait_for("both replicas scraped", both_up, LOOK_S)
    with Load(url(lab, REAL), MODEL, concurrency=2, max_tokens=16) as load:
        passed(load, 4)

        def recorded():
            got = {}
            for record in ("sglang_fleet:generation_tokens:rate", "sglang_fleet:ttft_seconds:p99"):
                result = prometheus(lab, "/api/v1/query", f'{record}{{host="{REAL}"}}')["data"]["result"]
                got[record] = [float(r["value"][1]) for r in result]
            return got if all(v and v[0] > 0 for v in got.values()) else None
        values = wait_for("the class's records computed from real-1's own series", recorded, LOOK_S)
    assert load.report.failed == 0, load.report.failures()
    assert len(values["sglang_fleet:generation_tokens:rate"]) == 1, values  # one per host, whatever its labels
    groups = prometheus(lab, "/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"] if CLASS in g["name"]]
    assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]


def _change(tmp_path, name: str, extra: str):
    return workdir(tmp_path / name, gateway=GATEWAY, monitoring=MONITORING, cpu_real=extra)


ROLLED = 'service = {**service, "extra_args": [("8" if a == "16" else a) for a in service["extra_args"]]}'


def test_a_rolling_change_behind_smg_through_the_real_drain_fails_no_request(real, tmp_path):
    lab = real
    cwd = _change(tmp_path, "rolled", ROLLED)
    with Load(url(lab, GW), MODEL, KEY, concurrency=4, max_tokens=32) as load:
        passed(load, 8)
        run = deploy(lab, cwd, env=ENV, timeout=900)
        passed(load, 8)
    assert run.returncode == 0, run.out
    assert load.report.failed == 0, load.report.failures()
    order = [line.split("]")[0].strip("[ ") for line in run.out.splitlines() if "out of gateway gw-1" in line]
    assert order == [REAL, DOUBLE], run.out  # the real server is the canary
    for host in (REAL, DOUBLE):
        assert "--max-running-requests 8" in cmdline(lab, host)
    lab.rolled = cwd


def test_a_new_spec_the_real_server_refuses_at_start_up_is_rolled_back(real, tmp_path):
    """triton attention on a CPU: SGLang's parser takes the flag, its start-up fails (no GPU driver)."""
    lab = real
    cwd = _change(tmp_path, "crash", ROLLED + '\nservice = {**service, "extra_args": '
                  '[("triton" if a == "torch_native" else a) for a in service["extra_args"]]}')
    before = main_pid(lab, DOUBLE)
    with Load(url(lab, GW), MODEL, KEY, concurrency=2, max_tokens=16) as load:
        passed(load, 4)
        run = deploy(lab, cwd, env=ENV, timeout=900)
        passed(load, 4)
    assert run.returncode != 0, run.out
    assert load.report.failed == 0, load.report.failures()
    assert "rolled back" in summary_row(run.out, REAL) and "NOT ROLLED" in summary_row(run.out, DOUBLE), run.out
    # the real server's own refusal, in the journal lines the deploy shows of the failed start
    assert "RuntimeError: 0 active drivers" in run.out, run.out
    # the end state: the previous real server serving, its unit as before, nothing of the rollout left
    assert health(lab, REAL) == "200"
    assert "--attention-backend torch_native" in unit_line(lab, REAL) and "triton" not in cmdline(lab, REAL)
    assert "--max-running-requests 8" in cmdline(lab, REAL)
    assert sh(lab, REAL, f"ls {LOCK_FILE} /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null") == ""
    assert main_pid(lab, DOUBLE) == before
    assert sh(lab, GW, "cat /etc/smg/smg-workers.json").count('"id"') == 2


def _drain(lab, host: str, stream_tokens: int) -> dict:
    """What one server does on SIGTERM (the unit's stop: KillMode=mixed) with a stream running at the signal."""
    chunks, done = [], threading.Event()

    def stream():
        try:
            for line in _chat(lab, host, stream=True, max_tokens=stream_tokens).iter_lines(decode_unicode=True):
                if line:
                    chunks.append(line)
        finally:
            done.set()
    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    wait_for(f"{host}: the stream under way", lambda: len(chunks) >= 3, LOOK_S)
    pid = main_pid(lab, host)
    sh(lab, host, "systemctl --no-block stop sglang.service")
    # /health at once: polled from the signal on (its own bound: the drain lasts as long as the stream)
    codes = []

    def unhealthy():
        try:
            codes.append(requests.get(url(lab, host, "/health"), timeout=10).status_code)
        except requests.RequestException as e:
            codes.append(type(e).__name__)
        return codes[-1] != 200
    wait_for(f"{host}: /health no longer 200", unhealthy, LOOK_S)
    seen = {"health": codes[-1], "stream running at the signal": not done.is_set()}
    seen["new request while draining"] = _chat(lab, host).status_code
    reader.join(LOOK_S)
    seen["stream finished whole"] = bool(chunks) and chunks[-1] == "data: [DONE]"
    wait_for(f"{host}: the server gone after its drain",
             lambda: sh(lab, host, f"kill -0 {pid} 2>/dev/null || echo gone") == "gone", LOOK_S)
    seen["unit"] = wait_for(f"{host}: its unit stopped", lambda: (lambda state: state if state in (
        "inactive", "failed") else None)(sh(lab, host, "systemctl is-active sglang.service")), LOOK_S)
    return seen


def test_the_sigterm_drain_is_the_real_servers_and_a_stopped_real_server_pages(real):
    """Last: it stops both servers. The real server streams 14-40 tokens/s here, the double 100."""
    lab = real
    seen = {REAL: _drain(lab, REAL, 300), DOUBLE: _drain(lab, DOUBLE, 1500)}
    expected = {"health": 503, "stream running at the signal": True, "new request while draining": 200,
                "stream finished whole": True, "unit": "inactive"}
    assert seen == {REAL: expected, DOUBLE: expected}, seen
    bound = lab_monitoring().delivery_bound_s(DOWN_FOR_S)

    def paged():
        alerts = prometheus(lab, "/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "SGLangReplicaDown" and a["labels"].get("host") == REAL
                and a["state"] == "firing"]
    wait_for(f"SGLangReplicaDown for {REAL} firing (declared bound {bound:g} s)", paged, LOOK_S)

"""Helpers for end-to-end tests: run the real pyinfra deploy against the running lab."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CODE = ("deploy.py", "adapter", "tasks", "fleet", "facts", "templates", "ops")


def workdir(tmp: Path, **overrides: str) -> Path:
    """A copy of the deploy whose group_data/<class>.py gets extra lines (e.g. a short timeout)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in CODE:
        (tmp / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "group_data", tmp / "group_data")
    for group, text in overrides.items():
        with open(tmp / "group_data" / f"{group}.py", "a") as f:
            f.write("\n" + text + "\n")
    return tmp


# A gateway group of two hosts behind a floating address (lab/gateway.toml's gw-1 and gw-2): what group_data/gateway.py
# gets in such a lab, the address the lab's subnet's .100, the VRRP password from this variable.
VRRP_ENV = {"SGLANG_FLEET_VRRP_PASSWORD": "lab-vrrp"}
FAILOVER_S = 5  # gateway.floating.failover_s: a holder silent for 3 advertisements (1 s each) and the election


def floating_address(subnet: str) -> str:
    return str(ipaddress.ip_network(subnet)[100])


def floating(subnet: str) -> str:
    """group_data/gateway.py's line for a lab (its subnet) whose gateway group has two hosts (lab/gateway.toml)."""
    return (f'gateway = {{**gateway, "floating": {{"address": "{floating_address(subnet)}", "router_id": 51, '
            f'"password": {{"env": "SGLANG_FLEET_VRRP_PASSWORD"}}, "failover_s": {FAILOVER_S}}}}}')


GATEWAY_FAULTS = ("smg killed -9", "link dropped", "box powered off")


def gateway_fault(lab, gateway: str, what: str, on: bool) -> None:
    """One of GATEWAY_FAULTS on a gateway host (on), or its end (off): a killed smg is started again by systemd
    (Restart=on-failure), a link comes back, a box boots."""
    from lab import lab as labmod
    if what == "smg killed -9":
        if on:
            sh(lab, gateway, "kill -9 $(systemctl show -p MainPID --value smg.service)")
    elif what == "link dropped":
        labmod.link(gateway, not on)
    else:
        labmod.power(gateway, not on)


def mesh_pki(where: Path, gateways: dict[str, str]) -> str:
    """A CA and each gateway's certificate (its address as a SAN) and PKCS#8 key, made with openssl in `where`;
    group_data/gateway.py's line turning smg's mesh on with them."""
    where.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=lab smg mesh CA", "-keyout", "ca.key", "-out", "ca.pem")
    for name, ip in gateways.items():
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", f"{name}.key")
        openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr")
        (where / f"{name}.ext").write_text(f"subjectAltName = IP:{ip}\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days",
                "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")
    tls = {"ca_cert": {"file": f"{where}/ca.pem"}, "cert": {"file": f"{where}/{{host}}.crt"},
           "key": {"file": f"{where}/{{host}}.key"}}
    return f'gateway = {{**gateway, "mesh": {{"tls": {tls!r}}}}}'


def verify_checks() -> int:
    """How many checks `make verify` runs on one GPU host (tests/verify/test_service.py's tests)."""
    return len(re.findall(r"(?m)^def test_", (REPO / "tests/verify/test_service.py").read_text()))


def deploy(lab, cwd: Path = REPO, *args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """`pyinfra -y <lab inventory> deploy.py`, as an operator runs it; output kept for the assertions.
    env: more environment (where group_data's secrets come from)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **(env or {})}
    p = subprocess.run(
        [str(BIN / "pyinfra"), "-y", *args, str(lab.inventory), "deploy.py"],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )
    p.out = p.stdout + p.stderr
    return p


def sh(lab, host: str, command: str) -> str:
    p = lab.ssh(host, command, timeout=30)
    return p.stdout.strip()


def main_pid(lab, host: str, unit: str = "sglang.service") -> int:
    return int(sh(lab, host, f"systemctl show -p MainPID --value {unit}") or 0)


def health(lab, host: str, port: int = 30000) -> str:
    return sh(lab, host, f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 http://127.0.0.1:{port}/health")


def gpu_apps(lab, host: str) -> list[str]:
    out = sh(lab, host, "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits")
    return [line for line in out.splitlines() if line.strip()]


def records(lab, host: str) -> list[dict]:
    out = sh(lab, host, "cat /var/lib/sglang-fleet/sglang/deploys.jsonl 2>/dev/null")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def summary_row(output: str, host: str) -> str:
    """The host's row of the closing table."""
    table = output.rsplit("SGLang fleet rollout summary", 1)[-1]
    return next((line for line in table.splitlines() if line.startswith(host + " ")), "")


def interrupted(lab, cwd: Path, host: str, sig: int, on_line: str | None = None, when=None, after: float = 0.0,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """Deploy to one host and send `sig` to the controller once a line of its output contains
    `on_line`, or once `when()` is true (polled), `after` seconds later. Returns the run, its
    output in `.out` (whatever came before the signal: no trigger, no signal, a failing test)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    p = subprocess.Popen(
        [str(BIN / "pyinfra"), "-y", "--limit", host, str(lab.inventory), "deploy.py"],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in p.stdout:
            lines.append(line)
            if on_line is not None and on_line in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    fired = False
    while p.poll() is None and time.monotonic() < deadline:
        if seen.is_set() or (when is not None and when()):
            time.sleep(after)
            p.send_signal(sig)
            fired = True
            break
        time.sleep(0.05 if when is None else 0.0)
    if not fired:
        p.kill()
    p.wait(timeout=60)
    reader.join(timeout=10)
    done = subprocess.CompletedProcess(p.args, p.returncode)
    done.out, done.fired = "".join(lines), fired
    return done


class Run:
    """`pyinfra -y --limit H ... deploy.py` in the background, each line of its output with the time it came."""

    def __init__(self, lab, cwd, hosts, env: dict | None = None):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **(env or {})}
        limits = [a for h in hosts for a in ("--limit", h)]
        self.p = subprocess.Popen([str(BIN / "pyinfra"), "-y", *limits, str(lab.inventory), "deploy.py"], cwd=cwd,
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.append((time.monotonic(), line))

    def said(self, host: str, text: str) -> bool:
        return any(of(host, text, line) for _, line in self.lines)

    def first(self, host: str, text: str) -> float:
        """When the host's first line that holds `text` came."""
        return next(t for t, line in self.lines if of(host, text, line))

    def wait(self, timeout: float) -> int:
        """Its exit status once it ends by itself (a run that hangs fails here)."""
        try:
            return self.p.wait(timeout=timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
            self.reader.join(timeout=10)

    @property
    def out(self) -> str:
        return "".join(line for _, line in self.lines)


def of(host: str, text: str, line: str) -> bool:
    """A line pyinfra printed for the host ("    [host]   text") that holds `text`."""
    return f"[{host}]" in line and text in line


def in_its_readiness_wait(lab, run: Run, host: str, new_argv: str, timeout: float = 120) -> None:
    """Until the deploy waits for the host's /health, its new server (whose argv holds `new_argv`)
    loading: the spec's load must leave a few seconds for what comes next."""
    deadline = time.monotonic() + timeout
    new_server = ("tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline | grep -q -- "
                  + shlex.quote(new_argv))
    while not (run.said(host, "restart sglang.service: waiting for /health")
               and lab.ssh(host, new_server, timeout=5).returncode == 0):
        assert time.monotonic() < deadline and run.p.poll() is None, run.out
        time.sleep(0.2)
    time.sleep(0.5)  # the restart's own command has answered: the deploy is in the gate's wait


# --- a lab monitoring host (role = "monitoring"): its Prometheus, Alertmanager and webhook receiver ----------
SCRAPE_S, EVAL_S, WINDOW_S, FOR_S, GROUP_WAIT_S = 1, 1, 5, 5, 1
DOWN_FOR_S = 2  # shorter than a replica's restart: a rollout's turn would page, were it not silenced


def monitoring_overrides(floors: dict[str, float]) -> str:
    """group_data/monitoring.py's lines for a lab: seconds, not minutes, and lab-webhook as the receiver."""
    return (f'monitoring = {{**monitoring, "scrape_interval_s": {SCRAPE_S}, "evaluation_interval_s": {EVAL_S}, '
            f'"rate_window_s": {WINDOW_S}, "group_wait_s": {GROUP_WAIT_S}, "group_interval_s": 1, '
            '"receivers": [{"name": "lab", "webhook_url": "http://127.0.0.1:9099/alerts"}], '
            f'"alerts": {{"accept_length_floor": {floors!r}, "accept_length_for_s": {FOR_S}, '
            f'"replica_down_for_s": {DOWN_FOR_S}}}}}')

def prometheus(lab, path: str, query: str | None = None, host: str = "mon-1") -> dict:
    """Prometheus' API on the monitoring host; a query is sent URL-encoded (its braces and quotes as they are)."""
    asked = f" -G --data-urlencode {shlex.quote('query=' + query)}" if query is not None else ""
    return json.loads(sh(lab, host, f"curl -s --globoff --max-time 5{asked} 'http://127.0.0.1:9090{path}'"))


def silences(lab, host: str = "mon-1") -> list[dict]:
    return json.loads(sh(lab, host, "curl -s --max-time 5 http://127.0.0.1:9093/api/v2/silences"))


def notifications(lab, host: str = "mon-1") -> list[tuple[str, dict]]:
    """(status, labels) of every alert in every notification lab-webhook got, in order."""
    out = []
    for line in sh(lab, host, "cat /var/lib/lab-webhook/received.jsonl 2>/dev/null").splitlines():
        body = json.loads(line)["body"]
        out += [(a["status"], a["labels"]) for a in body.get("alerts", [])]
    return out


def wait_for(what: str, check, timeout: float):
    """check() until it gives something true (returned), or AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def quiet_alerts(lab, settle_s: float) -> int:
    """Wait until nothing fires and what resolved has been sent; the webhook's count of alerts then."""
    wait_for("no alert firing", lambda: not [a for a in prometheus(lab, "/api/v1/alerts")["data"]["alerts"]
                                             if a["state"] == "firing"], 90)
    time.sleep(settle_s)
    return len(notifications(lab))

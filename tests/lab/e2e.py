"""Helpers for end-to-end tests: run the real pyinfra deploy against the running lab."""

from __future__ import annotations

import datetime
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


# The lab's canary analysis: a smaller load than a GPU's default (the doubles decode 100 tokens/s a request), and
# a looser tokens/s bound: the lab's hosts share a few busy cores, the accept length is the double's own figure. Off
# but where a test is about it (workdir's canary_analysis): a test of another feature that changes the draft length
# would be judged by the speed model's tokens/s (a slower length is a regression by design), on a busy machine too.
def lab_canary(analysis: bool) -> str:
    return (f'canary = {{**canary, "analysis": {analysis}, "requests": 4, "concurrency": 2, "max_tokens": 64, '
            '"min_tokens_per_s": 0.5, "timeout_s": 60}')


def workdir(tmp: Path, canary_analysis: bool = False, **overrides: str) -> Path:
    """A copy of the deploy whose group_data/<class>.py gets extra lines (e.g. a short timeout); canary_analysis:
    the lab's smaller load judges each class's canary (tests/lab/test_canary_e2e.py, the gateway's rolling test)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in CODE:
        (tmp / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "group_data", tmp / "group_data")
    with open(tmp / "group_data" / "all.py", "a") as f:
        f.write("\n" + lab_canary(canary_analysis) + "\n")
    for group, text in overrides.items():
        with open(tmp / "group_data" / f"{group}.py", "a") as f:
            f.write("\n" + text + "\n")
    return tmp


# The same hosts for tests/lab/test_turns_e2e.py, test_lost_link_e2e.py and test_canary_e2e.py: three PRO 6000 boxes
# serving the old NEXTN spec beside their training jobs (a spec's load time is its own: LAB_SGLANG_LOAD_SECONDS in its
# environment).
PRO3_HOSTS = ("pro-1", "pro-2", "pro-3")
# A new revision of the class's drafter on each of them that loads and serves but accepts little with its target
# (lab/doubles/README.md: a draft's declared acceptance): tests/lab/test_canary_e2e.py.
PRO3_POOR_DRAFT = "/root/models/Qwen3.6-27B-DFlash-v2"
PRO3_LAB = ('[lab]\nname = "pro3lab"\nsubnet = "10.221.0.0/24"\n' + "".join(
    f'\n[[hosts]]\nname = "{h}"\ngroup = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
    'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 1\nworkloads = ["dflash-train"]\n'
    'preinstalled = { speculative = { algorithm = "NEXTN", num_steps = 3, topk = 1, num_draft_tokens = 4 } }\n'
    f'draft_acceptance = {{ "{PRO3_POOR_DRAFT}" = {{ "/root/models/Qwen3.6-27B" = 0.2 }} }}\n'
    for h in PRO3_HOSTS))


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


def gateway_fault(lab, gateway: str, what: str, on: bool) -> float:
    """One of GATEWAY_FAULTS on a gateway host (on), or its end (off): a killed smg is started again by systemd
    (Restart=on-failure), a link comes back, a box boots. Returns when it took effect, its own timestamp (time.time();
    the hosts' clock is this machine's): the kill's on the host, the link's or the power's as lab.lab did it."""
    if what == "smg killed -9":
        if on:
            return float(sh(lab, gateway, "kill -9 $(systemctl show -p MainPID --value smg.service) && date +%s.%N"))
        return time.time()  # systemd starts it again by itself
    if what == "link dropped":
        return lab.link(gateway, not on)
    return lab.power(gateway, not on)


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
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **MONITORING_ENV, **(env or {})}
    p = subprocess.run(
        [str(BIN / "pyinfra"), "-y", *args, str(lab.inventory), "deploy.py"],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )
    p.out = p.stdout + p.stderr
    return p


def make_verify(lab, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """make verify (its pytest-testinfra suite) from the group_data deployed (`lab.base`: the first deploy's), or
    `cwd`'s."""
    return subprocess.run([str(BIN / "pytest"), "-v", "-p", "no:cacheprovider", str(REPO / "tests/verify"),
                           "--inventory", str(lab.inventory), *args], cwd=cwd or lab.base, capture_output=True,
                          text=True, timeout=600)


def make_status(lab) -> subprocess.CompletedProcess:
    """make status (python -m ops status) from the group_data deployed (`lab.base`)."""
    return subprocess.run([str(BIN / "python"), "-m", "ops", "status", str(lab.inventory)], cwd=lab.base,
                          capture_output=True, text=True, timeout=300)


def host_json(lab, host: str) -> dict:
    """What the lab wrote of a host as its lab file declares it (/etc/lab/host.json)."""
    p = lab.ssh(host, "cat /etc/lab/host.json", timeout=20)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


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


def canary_analysis(output: str, host: str) -> str:
    """The canary analysis's line among the host's lines under the closing table ('' if none)."""
    table = output.rsplit("SGLang fleet rollout summary", 1)[-1].splitlines()
    start = next(i for i, line in enumerate(table) if line.startswith(host + " "))
    for line in table[start + 1:]:
        if not line.startswith("    "):
            break
        if "canary analysis" in line:
            return line.strip()
    return ""


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


# Every lab deploy's monitoring password (group_data/monitoring.py's default source); the lab's own calls to
# Prometheus and Alertmanager on mon-1 authenticate as the deploy's do, with the 0600 curl configuration it writes.
MONITORING_ENV = {"SGLANG_FLEET_MONITORING_PASSWORD": "lab-monitoring-0123"}
MON_CURL = "curl -K /etc/prometheus/sglang-fleet-curl"


def lab_monitoring():
    """The lab's monitoring spec as monitoring_overrides() declares it (its bounds: delivery_bound_s)."""
    from fleet.monitoring.models import Monitoring
    return Monitoring(scrape_interval_s=SCRAPE_S, evaluation_interval_s=EVAL_S, rate_window_s=WINDOW_S,
                      group_wait_s=GROUP_WAIT_S, group_interval_s=1)


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
    return json.loads(sh(lab, host, f"{MON_CURL} -s --globoff --max-time 5{asked} 'http://127.0.0.1:9090{path}'"))


def silences(lab, host: str = "mon-1") -> list[dict]:
    return json.loads(sh(lab, host, f"{MON_CURL} -s --max-time 5 http://127.0.0.1:9093/api/v2/silences"))


def notifications(lab, host: str = "mon-1") -> list[tuple[str, dict, float]]:
    """(status, labels, when lab-webhook got it: time.time()) of every alert in every notification, in order."""
    out = []
    for line in sh(lab, host, "cat /var/lib/lab-webhook/received.jsonl 2>/dev/null").splitlines():
        record = json.loads(line)
        out += [(a["status"], a["labels"], record["at"]) for a in record["body"].get("alerts", [])]
    return out


def at_on(lab, host: str, command: str) -> float:
    """Run `command` on the host; when it had run, by the host's own clock (this machine's): a fault's timestamp."""
    return float(sh(lab, host, f"{command} && date +%s.%N").splitlines()[-1])


def wait_for(what: str, check, timeout: float):
    """check() until it gives something true (returned), or AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def _rfc3339(text: str) -> float:
    """Prometheus' timestamps (nanoseconds, Z) as time.time()."""
    day, _, rest = text.rstrip("Z").partition("T")
    clock, _, fraction = rest.partition(".")
    whole = datetime.datetime.fromisoformat(f"{day}T{clock}+00:00").timestamp()
    return whole + float(f"0.{fraction or 0}")


def quiet_since(lab, since: float, timeout: float = 60) -> int:
    """Until what a rollout could have paged is known, from the events themselves: every target scraped and up after
    `since` (time.time()), every rule group evaluated after those scrapes, no alert firing or pending in Prometheus,
    none in Alertmanager that it would send (active, not silenced), and every alert the webhook got as firing
    resolved there too. Returns the webhook's count of alerts then."""
    def quiet() -> bool:
        targets = prometheus(lab, "/api/v1/targets?state=active")["data"]["activeTargets"]
        scraped = [_rfc3339(t["lastScrape"]) for t in targets]
        if not targets or min(scraped) <= since or any(t["health"] != "up" for t in targets):
            return False
        groups = prometheus(lab, "/api/v1/rules")["data"]["groups"]
        if any(_rfc3339(g["lastEvaluation"]) <= max(scraped) for g in groups):
            return False
        if prometheus(lab, "/api/v1/alerts")["data"]["alerts"]:
            return False
        held = json.loads(sh(lab, "mon-1", f"{MON_CURL} -s --max-time 5 'http://127.0.0.1:9093/api/v2/alerts?active=true"
                                           "&silenced=false&inhibited=false'"))
        if held:
            return False
        said = notifications(lab)
        firing = {json.dumps(labels, sort_keys=True) for status, labels, _ in said if status == "firing"}
        return firing <= {json.dumps(labels, sort_keys=True) for status, labels, _ in said if status == "resolved"}

    wait_for("Prometheus and Alertmanager quiet since the rollout", quiet, timeout)
    return len(notifications(lab))


SILENCE_LOOK_S = 60  # how long after a run's end a test looks for a silence of ours still active (issue 37)


def no_silence_left(lab, ended: float) -> list[dict]:
    """Every silence of ours on the monitoring host ends at the latest Monitoring.resolve_s after the run's end
    (`ended`, time.time()), by Alertmanager's own record of its end; and none is active SILENCE_LOOK_S after it
    (polled). Returns them all, expired."""
    bound = lab_monitoring().resolve_s()
    made = [s for s in silences(lab) if s["createdBy"] == "sglang-fleet"]
    assert not [s for s in made if _rfc3339(s["endsAt"]) > ended + bound], (ended, bound, made)
    wait_for("every silence of ours expired", lambda: not [
        s for s in silences(lab) if s["createdBy"] == "sglang-fleet" and s["status"]["state"] != "expired"],
        max(1.0, ended + SILENCE_LOOK_S - time.time()))
    return [s for s in silences(lab) if s["createdBy"] == "sglang-fleet"]


def quiet_alerts(lab) -> int:
    """quiet_since now: nothing fires, what resolved has been sent; the webhook's count of alerts then."""
    return quiet_since(lab, time.time(), 90)

"""make tune CLASS=<class> [HOST=<h>]: the draft length that serves best, measured on one host of the class.

    python -m ops tune INVENTORY --class C [--host H] [--block-sizes 4,8] [--concurrency 1,32] [--yes] [--apply]

The runbook (the decisions are fleet/tune/search.py's; this file is the talking):
  1. check   the host is on its declared spec and serving (make status's verdict), the class can be tuned
             (fleet.tune.search.refusals); behind a gateway a peer of it is ready there; without one, the operator
             confirms (--yes) that the host stops serving. A host a cut-off tune left is returned first.
  2. sweep   each candidate deployed by the deploy itself (pyinfra --limit H --data sglang_fleet_run=...:
             render, restart, gate, smoke test; a failure rolls back and the sweep goes on), kept out of its
             gateway, then the fixed workload streamed at each concurrency straight to the host, with its
             /metrics read around each
  3. return  one plain deploy of the host: its declared spec, restarted, back in its gateway; its tune
             mark (the host's tune.json) goes. Ctrl-C or a killed controller leaves the mark: the next
             make deploy or make tune returns the host.
  4. record  tuning/<class>.json (every figure, the winners), the group_data change it recommends (--apply
             writes it into the class file), and tuning/<class>.png when matplotlib is installed.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from fleet.core import hosts
from fleet.core import bounds
from fleet.rollout import intent
from fleet.tune import measure, search as tune
from fleet.turns import drains
from fleet.rollout.gate import url_host
from fleet.gateway.smg import Replica, merged, parse_workers, peer_problem
from fleet.spec.load import SpecError, class_files, load_class_specs, load_gateways
from fleet.rollout.lock import owner
from fleet.spec.secrets import SecretError, resolve
from fleet.spec import ClassSpec, Tune
from fleet.rollout.status import OK
from fleet.core.wire import Unreadable, clipped, excerpt
from ops.fleet import GROUP_DIR, Fleet, gateway_status

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
RECORDS = Path(tune.RECORDS_DIR)
INTERRUPTED = 130
PROGRESS_EVERY_S = 15  # how often a long deploy or level says where it is


class Refused(Exception):
    """The tune does not start (or cannot go on): its lines say why, each naming the host."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def say(message: str) -> None:
    print(message, flush=True)


class Tuner:
    def __init__(self, args, host_status):
        self.args, self.host_status = args, host_status
        self.inventory = args.inventory
        self.fleet = Fleet(self.inventory)
        self.group = args.gpu_class
        if self.group not in class_files(GROUP_DIR):
            raise Refused([f"tune: CLASS={self.group}: expected one of {', '.join(sorted(class_files(GROUP_DIR)))}"])
        members = [h for h in self.fleet.hosts if self.group in h.groups]
        if not members:
            raise Refused([f"tune: no host of class {self.group} in {self.inventory}"])
        self.host = next((h for h in members if h.name == args.host), None) if args.host else members[0]
        if self.host is None:
            raise Refused([f"tune: HOST={args.host}: expected a host of class {self.group}, found "
                           f"{', '.join(h.name for h in members)}"])
        self.name = self.host.name
        _, spec, problems = self.fleet.spec_of(self.host)
        if spec is None:
            raise Refused(problems)
        self.spec = _with_overrides(spec, args)
        self.url = f"http://{url_host(self.host.data.get('ssh_hostname') or self.name)}:{self.spec.service.port}"
        self.gateway, self.replicas = self._gateway()

    def _gateway(self) -> tuple[hosts.Routing | None, list[Replica]]:
        """The gateway routing the class (its hosts), as the deploy finds it, and the class's replicas. A gateway file
        that does not validate refuses the tune (the deploy's lookup takes it for none: its run is refused already)."""
        try:
            load_gateways(GROUP_DIR, load_class_specs(GROUP_DIR))
        except SpecError as e:
            raise Refused(e.problems) from None
        gw = hosts.routing(self.fleet.state.inventory, self.group, GROUP_DIR)
        if gw is None:
            return None, []
        self.gw_spec, self.gw_group = gw.spec, gw.group
        return gw, [r for r in gw.replicas if r.gpu_class == self.group]

    # --- 1. check ------------------------------------------------------------------------------------------
    def check(self) -> list[tune.Candidate]:
        cands, problems = tune.candidates(self.spec, self.args.block_sizes, self.args.tree_budgets)
        for c in cands if not problems else []:  # each a spec the deploy will take: refused before any host is touched
            try:
                tune.candidate_spec(self.spec, c)
            except ValueError as e:
                problems.append(str(e))
        refusals = tune.refusals(self.name, self.spec, problems, self.gateway.name if self.gateway else None,
                                 len(self.replicas))
        if refusals:
            raise Refused(refusals)
        row = self.status()
        if not row.tuning:
            self._on_its_spec(row)
        if self.gateway is not None:
            problem = self._peer_problem()
            if problem:
                raise Refused([f"{self.name}: tune: gateway {self.gateway.name}: {problem}"])
        else:
            self._confirm(len(cands))
        if row.tuning:  # confirmed first: its return restarts it too
            say(f"{self.name}: a make tune left it ({row.tuning}): returning it to its declared spec first")
            self.give_back()
            row = self.status()
            self._on_its_spec(row)
        self.row = row
        return cands

    def _on_its_spec(self, row) -> None:
        if row.verdict != OK:
            found = row.drift or "; ".join(row.reasons[:3]) or row.verdict
            raise Refused([f"{self.name}: tune: expected the host on its declared spec and serving (make status "
                           f"OK), found {row.verdict}: {excerpt(found, 400)}; make deploy first"])

    def status(self):
        row = self.host_status(self.fleet, self.host)
        self.fleet.close()  # the deploys connect on their own; a held connection would only idle
        return row

    def _peer_problem(self) -> str | None:
        views = {}
        for h in self.gateway.hosts:  # every gateway of the group: a peer must be ready in each
            why = self.fleet.connect(h)
            if why:
                return f"{h.name} unreachable: {why}"
            read = gateway_status(self.fleet, h, self.gw_spec, self.gw_group)
            try:
                views[h.name] = parse_workers(read.get("workers"))
            except Unreadable as e:
                return f"{h.name}: {e}"
        self.fleet.close()
        me = next(r for r in self.replicas if r.host == self.name)
        return peer_problem(me, self.replicas, merged(views))

    def _confirm(self, n: int) -> None:
        what = (f"{self.name} is behind no gateway: it stops serving for the tune ({n} restarts, then one more "
                "to its declared spec)")
        if self.args.yes:
            say(f"{what}; confirmed by --yes")
            return
        if not sys.stdin.isatty():
            raise Refused([f"{self.name}: tune: {what}: confirm with --yes (make tune ... ARGS=--yes)"])
        if input(f"{what}. Type yes to go on: ").strip() != "yes":
            raise Refused([f"{self.name}: tune: not confirmed; nothing was touched"])

    # --- 2. sweep ------------------------------------------------------------------------------------------
    def intent(self, candidate: tune.Candidate | None) -> intent.Intent:
        """What one of the tune's runs asks of the deploy (fleet/rollout/intent.py): a candidate, an overlay kept out of its
        gateway, or (None) the return to the declared spec; either way the host the tune's (its mark's and drain's
        owner and lease), no backup set kept, its record a tune's, the outcome written for this tune to read."""
        said = self.drain_owner()
        return intent.Intent(candidate.to_json() if candidate else {},
                             f"a make tune candidate ({candidate.describe()})" if candidate else "",
                             stay_out=candidate is not None, keep_backup=False, record="tune", owner=said["owner"],
                             lease_s=said["lease_s"], outcome=str(self.outcome_path))

    def deploy(self, candidate: tune.Candidate | None) -> tuple[int, str]:
        """One pyinfra run on the host: the candidate's, or (None) the declared spec's. (exit code, the host's
        outcome in words: its verdict and reasons, as the run wrote them)."""
        argv = [PYINFRA, "-y", "--limit", self.name,
                "--data", f"{intent.INTENT_DATA}={json.dumps(self.intent(candidate).to_json())}",
                self.inventory, "deploy.py"]
        self.outcome_path.unlink(missing_ok=True)
        log = open(self.log_path, "a")
        log.write(f"\n$ {' '.join(argv)}\n")
        log.flush()
        self.child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        started = time.monotonic()
        try:
            while (rc := _wait(self.child, PROGRESS_EVERY_S)) is None:  # a GPU's load takes minutes: say where it is
                say(f"  deploying, {time.monotonic() - started:.0f}s: {_last_line(self.log_path)}")
        finally:
            log.close()
        return rc, _outcome(self.outcome_path, self.name, self.log_path)

    def drain_owner(self) -> dict:
        """The host this tune's, for one candidate's deploy and measuring (renewed by each): its tune mark's lease and
        its drain on the gateway; a make deploy meanwhile refuses it and leaves it out; once the tune is gone, its
        lease lapses (a stopped tune ends it: release())."""
        measuring = self.spec.tune.level_timeout_s * len(self.spec.tune.concurrency)
        through = self.gw_spec.rolling if self.gateway is not None else None
        return {"owner": f"make tune of {self.name} (pid {os.getpid()} on {socket.gethostname()})",
                "lease_s": round(bounds.turn_s(self.spec, through) + measuring + bounds.MARGIN_S)}

    def release(self) -> None:
        """Interrupted: the host left to the next run, which returns it to its declared spec: its tune mark's lease
        ended, and behind smg its drain released (it stays out, serving a candidate, until that run takes it over);
        where that fails, both lapse with their lease."""
        ok, out = self.fleet.run(self.host, f"{tune.LAPSE} {shlex.quote(self.spec.tune_file)}", bounds.MARGIN_S)
        if not ok:
            say(f"{self.name}: its tune mark's lease not ended ({excerpt(out)}): a make deploy returns it once it "
                "has passed")
        if self.gateway is None:
            return
        command = drains.command(self.gw_spec.python, self.gw_spec.unit, self.gw_spec.discovery_file,
                                 self.gateway.replicas, drains.RELEASE, self.name, self.drain_owner()["owner"],
                                 why="left by an interrupted make tune: the next run takes it over")
        for h in self.gateway.hosts:
            ok, out = self.fleet.run(h, command, bounds.MARGIN_S + drains.LOCK_WAIT_S)
            answer = drains.parse(out) if ok else None
            if answer is None or not answer.ok:
                say(f"{h.name}: {self.name}'s drain not released ({answer.describe() if answer else excerpt(out)}): "
                    "a make deploy takes it over once its lease has passed")

    def measure(self, candidate: tune.Candidate) -> list[tune.Level]:
        """The fixed workload at each concurrency, sent from the host to its own server (fleet.tune.measure: the
        canary analysis's routine too)."""
        t, levels = self.spec.tune, []
        for c in t.concurrency:
            load = measure.Load(t.requests(c), c, t.max_tokens, tuple(t.prompts or tune.PROMPTS), t.level_timeout_s)
            say(f"  {candidate.describe()}, concurrency {c}: {load.requests} requests, at most {t.level_timeout_s:g}s")
            ok, out = self.fleet.run(self.host, measure.command(self.spec, load),
                                     measure.bound(load, "the tune's load").seconds)
            try:
                lv = measure.parse(out, load)
            except Unreadable as e:
                lv = tune.level(c, [], 0.0, {}, {}, planned=load.requests)
                lv.errors = [clipped(f"{e}" if ok else f"the load did not run: {out}", 300)]
            levels.append(lv)
            say(f"  {candidate.describe()}, concurrency {c}: {lv.tokens_per_s:.1f} tok/s, accept length "
                f"{_num(lv.accept_length)}, p50 {_ms(lv.latency_p50_s)}, p99 {_ms(lv.latency_p99_s)}, "
                f"{lv.failed} of {lv.requests} failed" + (f" ({lv.errors[0]})" if lv.errors else ""))
        self.fleet.close()  # the next candidate's deploy connects on its own
        return levels

    def source(self) -> str:
        try:
            with requests.get(self.url + "/server_info", headers=self._auth(), timeout=10) as r:
                info = r.json() if r.status_code == 200 else {}
        except (requests.RequestException, ValueError):
            info = {}
        if isinstance(info, dict) and info.get("lab_double") is True:
            return "the lab's SGLang double (lab/doubles): its documented speed model, not a GPU's figures"
        return f"SGLang on {self.name}'s GPUs"

    def _auth(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def sweep(self, cands: list[tune.Candidate], results: list[tune.Result]) -> None:
        """Each candidate's result into `results` as it ends: an interrupted sweep keeps what it measured."""
        for i, c in enumerate(cands, 1):
            say(f"{self.name}: candidate {i} of {len(cands)}: {c.describe()}: deploying")
            t0 = time.monotonic()
            rc, row = self.deploy(c)
            if rc == INTERRUPTED:
                # a Ctrl-C or a kill stopped the deploy (it handles SIGINT and SIGTERM itself, even where this
                # process was started with SIGINT ignored, as a non-interactive shell's `&` does): the operator's
                # stop, not a failed candidate to sweep past
                raise KeyboardInterrupt
            if rc != 0:
                results.append(tune.Result(c, False, f"the deploy failed (exit {rc}): {excerpt(row, 300)}"))
                say(f"  {c.describe()}: not deployed: {excerpt(row, 300)} (the sweep goes on)")
                continue
            say(f"  serving in {time.monotonic() - t0:.1f}s; measuring")
            results.append(tune.Result(c, True, levels=self.measure(c)))

    # --- 3. return -----------------------------------------------------------------------------------------
    def give_back(self) -> None:
        rc, row = self.deploy(None)
        if rc != 0:
            raise Refused([f"{self.name}: tune: the return to its declared spec failed (exit {rc}): "
                           f"{excerpt(row, 300)}; its tune mark stays: make deploy returns it (see {self.log_path})"])
        say(f"{self.name}: back on its declared spec" + (f" and in gateway {self.gateway.name}" if self.gateway else ""))

    # --- 4. record -----------------------------------------------------------------------------------------
    def write(self, results: list[tune.Result], started: int, finished: bool) -> dict:
        rec = tune.record(host=self.name, group=self.group, spec=self.spec, gpus=self.row.gpus,
                          engine=self.spec.engine.name if self.spec.engine else self.row.sglang,
                          weights=self.row.weights, source=self.source_text, results=results, started=started,
                          ended=int(time.time()), by=owner()["holder"], finished=finished)
        RECORDS.mkdir(exist_ok=True)
        path = RECORDS / f"{self.group}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=2) + "\n")
        tmp.rename(path)
        say(f"record: {path}")
        return rec

    def run(self) -> int:
        RECORDS.mkdir(exist_ok=True)
        self.log_path = RECORDS / f"{self.group}.log"
        self.outcome_path = (RECORDS / f"{self.group}.outcome.json").resolve()  # each run's, read back as data
        self.log_path.write_text("")
        cands = self.check()
        self.api_key = self._api_key()
        self.source_text = self.source()
        started = int(time.time())
        say(f"{self.name}: tuning {self.group}: {len(cands)} candidates x concurrency "
            f"{', '.join(map(str, self.spec.tune.concurrency))} (the deploys' output: {self.log_path})")
        results: list[tune.Result] = []
        try:
            self.sweep(cands, results)
        except KeyboardInterrupt:
            if getattr(self, "child", None) is not None:
                self.child.wait()  # it had the Ctrl-C too: let it say where the host is
            self.release()
            say(f"\ninterrupted: {self.name} keeps its tune mark; the next make deploy (or make tune) returns it "
                "to its declared spec" + (f" and into gateway {self.gateway.name}" if self.gateway else ""))
            self.write(results, started, finished=False)
            return INTERRUPTED
        try:
            self.give_back()
        finally:  # the figures are kept whatever the return did
            rec = self.write(results, started, finished=True)
        self.report(rec)
        return 0 if rec["winner"] else 1

    def _api_key(self) -> str | None:
        try:
            return resolve(self.spec, str(GROUP_DIR / f"{self.group}.py")).api_key
        except SecretError as e:
            raise Refused([f"{self.name}: tune: {p}" for p in e.problems]) from None

    def report(self, rec: dict) -> None:
        for c, w in rec["winner_per_concurrency"].items():
            say(f"best at concurrency {c}: " + (tune.Candidate(**w).describe() if w else "none (every candidate failed)"))
        if not rec["winner"]:
            say("no winner: no candidate served the objective's concurrency without a failed request")
            return
        say(f"winner (objective: tokens/s at concurrency {rec['objective']['concurrency']}"
            + (f", p99 within {rec['objective']['p99_latency_s']:g}s" if rec["objective"]["p99_latency_s"] else "")
            + f"): {tune.Candidate(**rec['winner']).describe()}")
        say(f"recommended group_data/{self.group}.py change: {tune.describe_change(self.spec, rec['change'])}")
        say(f"figures from {rec['figures_from']}")
        if self.args.apply and rec["change"]:
            path = GROUP_DIR / f"{self.group}.py"
            try:
                path.write_text(tune.apply_change(path.read_text(), rec["change"]))
                say(f"applied to {path}: make dry shows the rollout it makes")
            except Exception as e:  # noqa: BLE001 - the operator's file, as it is: say why and leave it
                say(f"not applied to {path}: {type(e).__name__}: {excerpt(str(e), 200)}; change it by hand")
        plot(rec, RECORDS / f"{self.group}.png")


def _with_overrides(spec: ClassSpec, args) -> ClassSpec:
    """The class's tune settings with the command line's over them, validated as group_data's are."""
    over = {k: v for k, v in {"concurrency": args.concurrency, "rounds": args.rounds, "max_tokens": args.max_tokens,
                              "objective_concurrency": args.objective_concurrency}.items() if v is not None}
    try:
        t = Tune.model_validate({**spec.tune.model_dump(exclude_defaults=True), **over})
    except ValueError as e:
        raise Refused([f"tune: the command line: {excerpt(str(e), 300)}"]) from None
    return spec.model_copy(update={"tune": t})


def _wait(child: subprocess.Popen, seconds: float) -> int | None:
    try:
        return child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def _last_line(log: Path) -> str:
    """The deploy's newest words, for progress (its log is the operator's own output)."""
    with open(log, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - 2048))
        lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    return excerpt(lines[-1], 160) if lines else "(no output yet)"


def _outcome(path: Path, host: str, log: Path) -> str:
    """The host's outcome as the run wrote it (fleet.core.report.RunReport.outcome): its verdict and reasons; a run that
    wrote none (it ended before its hosts had any) points at its output."""
    try:
        said = json.loads(path.read_text())[host]
        return " ".join([said["verdict"], *said["reasons"]])
    except (OSError, ValueError, KeyError, TypeError):
        return f"the run wrote no outcome for {host}: see {log}"


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1000:.0f} ms"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def plot(rec: dict, path: Path) -> None:
    """Tokens/s and accept length against the block size, a line per concurrency (matplotlib: optional)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("no picture: matplotlib is not installed (pip install matplotlib; the record has every figure)")
        return
    fig, (tps, acc) = plt.subplots(1, 2, figsize=(10, 4))
    budgets = sorted({r["candidate"].get("tree_budget", 0) for r in rec["candidates"]})  # DDTREE: a line per budget too
    for c in rec["workload"]["concurrency"]:
        for g in budgets:
            points = sorted(((r["candidate"]["block_size"], lv) for r in rec["candidates"] for lv in r["levels"]
                             if r["candidate"].get("tree_budget", 0) == g and lv["concurrency"] == c
                             and not lv["failed"]), key=lambda p: p[0])
            label = f"concurrency {c}" + (f", tree budget {g}" if g else "")
            tps.plot([b for b, _ in points], [lv["tokens_per_s"] for _, lv in points], marker="o", label=label)
            acc.plot([b for b, _ in points], [lv["accept_length"] or 0 for _, lv in points], marker="o", label=label)
    tps.set(xlabel="block size", ylabel="output tokens/s (client)", title=f"{rec['class']} on {rec['host']}")
    acc.set(xlabel="block size", ylabel="accept length (SGLang /metrics)")
    for ax in (tps, acc):
        ax.legend()
        ax.grid(True, alpha=0.3)
    fig.text(0.01, 0.01, f"figures from {rec['figures_from']}", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    say(f"picture: {path}")


def ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"expected numbers separated by commas, found {text!r}") from None


def add_parser(sub) -> None:
    t = sub.add_parser("tune", help="the draft length that serves a class best, measured on one of its hosts")
    t.add_argument("inventory")
    t.add_argument("--class", dest="gpu_class", required=True)
    t.add_argument("--host", help="which host of the class (default: its first in the inventory)")
    t.add_argument("--block-sizes", type=ints, help="e.g. 4,8,12,16 (default: tune.block_sizes)")
    t.add_argument("--tree-budgets", type=ints, help="DDTREE: e.g. 32,64 (default: tune.tree_budgets)")
    t.add_argument("--concurrency", type=ints, help="e.g. 1,8,32 (default: tune.concurrency)")
    t.add_argument("--rounds", type=int)
    t.add_argument("--max-tokens", type=int)
    t.add_argument("--objective-concurrency", type=int)
    t.add_argument("--yes", action="store_true", help="without a gateway: the host may stop serving")
    t.add_argument("--apply", action="store_true", help="write the winner into group_data/<class>.py")


def main(args, host_status) -> int:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        return Tuner(args, host_status).run()
    except Refused as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2

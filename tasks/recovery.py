"""What makes a rollout recoverable: its beginning, and what happens when it cannot end normally.

- begin: one command takes the deploy lock (compare-and-replace), checks that everything the
  plan and its rollback were made from is still what preflight read (the files, the deploy
  records, the service's and workloads' states), backs the files up and writes the
  pending-rollout record; anything changed refuses the host with nothing done.
- a pyinfra operation that fails on a host after that (an upload, a workload that will not
  stop) rolls the host back at once (a state callback), and frees the lock.
- an interrupt (Ctrl-C, SIGTERM) stops at once: no command runs on a host after it. Each
  begun host keeps its pending record, and its lock names a session that is gone, so the
  next run, from any machine, takes the lock over and finishes or rolls back that rollout.
  A controller killed outright (SIGKILL) leaves the same state behind.
- a begun host's lock is leased (tasks.common.Lease): a host whose link drops is given up
  (LOST) within readiness.link_timeout_s, with no rollback over the dead link; its lease runs
  out, so the next run takes its lock over and finishes or rolls back its rollout.
"""

from __future__ import annotations

import time

from pyinfra import host
from pyinfra.operations import python

from fleet.core import bounds
from fleet.rollout import commands as rollout, lock
from fleet.tune import search as tune
from fleet.core.outcome import HostVerdict
from fleet.rollout.plan import units_as_read
from tasks import activate
from adapter import run as runs
from tasks.common import Begun, HostLost, Lease, fail, run
from tasks.preflight import Preflight


def begin(pf: Preflight) -> None:
    runs.arm(host.state, _rolled_back_on_failure, _unfinished)
    python.call(name="Begin the rollout (deploy lock, backup, pending-rollout record)", function=_begin_or_lost, pf=pf)


def _begin_or_lost(state, host, pf: Preflight) -> bool:
    try:
        return _begin(state, host, pf)
    except HostLost as e:  # no answer to begin: it may have run there, or not
        return fail(host, e.why, f"{host.name}: its rollout may have begun there (this run's lock and a pending "
                                 "record) or not: nothing more runs on it; once it answers again, make deploy takes "
                                 f"the lock over when its lease has run out ({pf.spec.readiness.link_timeout_s:g}s) "
                                 "and finishes or rolls back that rollout", verdict=HostVerdict.LOST)


def _begin(state, host, pf: Preflight) -> bool:
    spec, p = pf.spec, pf.plan
    units = units_as_read(spec, pf.facts, taken_over=p.interrupted is not None)
    _, out = run(host, rollout.begin_command(
        spec,
        lock.owner(),
        pf.facts.deployed.lock,
        {path: pf.facts.deployed.sha1(path) for path in rollout.watched_files(spec)},
        p.before.backup if p.backup else None,
        p.record.to_json(),
        secret_uploads=[f.path for f in p.swap if f.secret and f.content is not None],
        copies={f.path: f.copied_from for f in p.swap if f.copied_from},
        units=units,
        overlay_mark=tune.mark(int(time.time()), lock.owner()["holder"], p.intent.says,
                               p.intent.owned, p.intent.record) if p.intent.overlay else None,
        prune_backups=p.intent.keep_backup,
    ), bounds.begin(spec))
    said = rollout.read_begin(out, spec, units)
    if said.begun:
        runs.of(state).begun[host.name] = Begun(pf, lease=Lease(host, spec).start())
        return True
    if said.lock_taken is not None or said.changed:
        runs.of(state).report.host(host.name).action = "none"
    if said.lock_taken is not None:
        holder = lock.describe(said.lock_taken) if said.lock_taken else "it has let it go again"
        return fail(host, f"{host.name}: deploy lock: expected no other deploy, found another deploy that took it "
                          f"since preflight: {holder}", verdict=HostVerdict.REFUSED)
    if said.changed:
        return fail(host, f"{host.name}: {said.changed}; nothing was done: run again", verdict=HostVerdict.REFUSED)
    words = "\n".join(line for line in out.split("\n") if not line.startswith("@@")).strip()
    return fail(host, f"{host.name}: could not begin the rollout, nothing was changed: {words[-300:]}")


def _rolled_back_on_failure(state, host, what: str) -> None:
    begun = runs.of(state).begun.get(host.name)
    if begun is not None:  # the failed operation's own error is printed above
        activate.after_failure(host, begun, what)


def _unfinished(run: runs.Run, how: str) -> None:
    """Say, for every host whose rollout began and did not end, where it is left."""
    for name in run.begun:
        report = run.report.host(name)
        report.verdict = HostVerdict.INTERRUPTED
        report.reasons.append(
            f"{name}: {how} mid-rollout; it keeps its pending-rollout record: the next run "
            "(make deploy) finishes this rollout or rolls it back to the state recorded before it"
        )
    run.begun.clear()

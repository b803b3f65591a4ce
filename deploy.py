"""Converge every host to the SGLang service its GPU class declares (group_data/<class>.py).

    pyinfra inventory.py deploy.py          # make deploy; make dry shows the plan and diffs first

The runbook, in order; a host that fails a step gets nothing after it but its rollback:
  1. preflight  every read-only check (right GPUs, engine, models, GPUs free, no other deploy,
                no local override), and the plan: what differs from the spec, and why
     engine     a declared engine not on the host yet: installed in a venv of its own beside the
                live one and checked there (capabilities, its parser over the command line)
     models     a declared revision (a model by repository and commit) missing or damaged: fetched
                into its own directory, at most hub.max_parallel hosts at once, and checked
  2. begin      deploy lock, backup, pending-rollout record: from here every failure rolls
                back, and an interrupted run is finished or rolled back by the next one
  3. install    upload the new unit, environment, secret beside the live ones
  4. activate   in the host's turn of its class's rollout (the canary alone, then at most
                rolling.max_unavailable at a time; the first failure stops the class): stop the
                declared GPU jobs (the training) and wait for their memory to free, put the files
                live, restart only if needed, wait for /health, smoke test; else roll back: files,
                service and workloads as they were before
A class routed by SGLang's gateway (group_data/gateway.py) is also drained out of it around each
restart (tasks/rolling.py); the gateway host itself gets smg (tasks/gateway.py), converged before
any replica restarts. The monitoring host (group_data/monitoring.py) gets Prometheus and Alertmanager
(tasks/monitoring.py), scraping every replica and gateway of the inventory with the rules made per class.
The run ends with a table per host (class, GPUs found, action, verdict, time to ready).
"""

from tasks import activate, engine, gateway, hub, install, monitoring, preflight, recovery

if gateway.is_gateway():
    gateway.converge()  # smg: install, unit, key, discovery file; restart only if they changed
if monitoring.is_monitoring():
    monitoring.converge()  # Prometheus, Alertmanager: packages, arguments, the generated bundle, checked; reload if changed
gateway.converged()  # where there is a gateway or monitoring host: no replica restarts before its steps are done
replica = not gateway.is_gateway() and not monitoring.is_monitoring()
if replica and (pf := preflight.check()) is not None and pf.plan.has_work:  # else: refused, or as declared
    engine.install(pf)  # the declared SGLang beside the live one, and checked, while everything still serves
    hub.fetch(pf)  # the declared revisions of target and draft, and checked, while everything still serves
    recovery.begin(pf)
    install.stage(pf)
    activate.service(pf)

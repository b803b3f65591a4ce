"""Converge every host to the SGLang service its GPU class declares (group_data/<class>.py).

    pyinfra inventory.py deploy.py          # make deploy; make dry shows the plan and diffs first

The runbook, in order; a host that fails a step gets nothing after it but its rollback:
  1. preflight  every read-only check (right GPUs, engine, models, GPUs free, no other deploy,
                no local override), and the plan: what differs from the spec, and why
  2. begin      deploy lock, backup, pending-rollout record: from here every failure rolls
                back, and an interrupted run is finished or rolled back by the next one
  3. install    upload the new unit, environment, secret beside the live ones
  4. workloads  stop the declared GPU jobs (the training) and wait for their memory to free
  5. activate   put the files live, restart only if needed, wait for /health, smoke test;
                else roll back: files, service and workloads as they were before
The run ends with a table per host (class, GPUs found, action, verdict, time to ready).
"""

from tasks import activate, install, preflight, recovery, workloads

pf = preflight.check()  # a refused host gets no operation but the refusal
if pf is not None and pf.plan.has_work:  # else: already as declared, no operation at all
    recovery.begin(pf)
    install.stage(pf)
    workloads.stop(pf)
    activate.service(pf)

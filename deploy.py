"""Converge every host to the SGLang service its GPU class declares (group_data/<class>.py).

    pyinfra inventory.py deploy.py          # make deploy; make dry shows the diffs first

The runbook, in order; a host that fails a step gets nothing after it:
  1. preflight  every read-only check: right GPUs, engine, models, GPUs free, no other deploy
  2. workloads  stop the declared GPU jobs (the training) and wait for their memory to free
  3. install    back up the current files, then write unit, environment, secret
  4. activate   restart only if a file changed; wait for /health; smoke test; else roll back
The run ends with a table per host (class, GPUs found, action, verdict, time to ready).
"""

from tasks import activate, install, preflight, workloads

pf = preflight.check()  # a refused host gets no operation but the refusal
if pf is not None:
    changes = install.pending_changes(pf)
    to_stop = workloads.running(pf)
    if preflight.planned(pf, changes, to_stop):  # else: already as declared, no operation at all
        activate.take_lock(pf)
        workloads.stop(pf)
        stamp = install.new_backup_stamp() if changes else None
        file_ops = install.service_files(pf, stamp) if changes else []
        activate.service(pf, file_ops, stamp)  # releases the lock, whatever happens

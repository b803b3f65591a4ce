"""The replicas a gateway host keeps out of its smg, and why: state on the host, so that every deploy, make tune and
recovery sees the drains of every other one (fleet/turns/drains.py builds the request and reads the answer).

Run on the gateway host, sent whole as `python3 -c <this file> STATE DISCOVERY REQUEST`:

    STATE      the drains, JSON: {"version": 1, "drains": {replica: {"owner", "until", "why"}}}
    DISCOVERY  smg's discovery file: every replica in REQUEST's "workers" but those drained
    REQUEST    JSON: {"op": "out" | "in" | "release" | "sync", "replica", "owner", "lease_s", "why", "peers",
               "workers"}

Under an exclusive lock of STATE + ".lock" (waited for at most LOCK_WAIT_S), a drain whose lease ("until", this
host's clock) has passed is dropped; then
    out   REPLICA drained by OWNER until now + lease_s, unless another owner's drain holds it, or one of "peers"
          (the replicas its caller counted as serving its model) is drained: then nothing changes
    in    REPLICA's drain ended, unless another owner's holds it
    release  REPLICA's drain, OWNER's, left to whoever comes next (owner ""): it stays out until a run takes it over
          or its lease passes (an interrupted make tune: the host still serves a candidate)
    sync  nothing: the discovery file rewritten from the drains (a deploy's gateway step)
and the discovery file is rewritten (atomically, where its content changed). Its answer is framed as fleet.core.wire's:
`@@result=ok|held|peer|busy|unreadable`, then its text as one base64 line; `@@drains`, the drains as JSON.

Only the standard library: nothing of the deploy is importable on a host.
"""

import base64
import fcntl
import json
import os
import sys
import time

LOCK_WAIT_S = 30  # fleet.turns.drains.LOCK_WAIT_S: another run's change takes a second


def say(key, value, text):
    sys.stdout.write("@@" + key + "=" + value + "\n" + base64.b64encode(text.encode()).decode() + "\n")


def locked(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.1)


def write(path, text):
    """Atomically, and only a change: smg reloads a discovery file it sees written."""
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def load(path, now):
    """The drains whose lease has not passed; None if the file is not ours."""
    try:
        with open(path) as f:
            state = json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError:
        return None
    drains = state.get("drains") if isinstance(state, dict) else None
    if not isinstance(drains, dict):
        return None
    return {k: v for k, v in drains.items() if isinstance(v, dict) and isinstance(v.get("until"), (int, float))
            and v["until"] > now}


def shown(drains, now):
    """The drains as answered: each with the seconds its lease has left."""
    return json.dumps({k: dict(v, left_s=round(v["until"] - now, 1)) for k, v in drains.items()}, sort_keys=True)


def change(drains, req, now):
    """(result, the drains that stand in the way); `drains` changed in place where the result is ok."""
    replica, owner = req.get("replica"), req.get("owner")
    held = drains.get(replica)
    if req["op"] in ("out", "in", "release") and held is not None and held.get("owner") not in (owner, ""):
        return "held", shown({replica: held}, now)
    if req["op"] == "out":
        drained = [p for p in req.get("peers", []) if p in drains]
        if drained:
            return "peer", shown({p: drains[p] for p in drained}, now)
        drains[replica] = {"owner": owner, "until": now + float(req["lease_s"]), "why": req.get("why", "")}
    elif req["op"] == "in":
        drains.pop(replica, None)
    elif req["op"] == "release" and held is not None:
        held.update(owner="", why=req.get("why", ""))
    return "ok", ""


def main(argv):
    state_path, discovery, req = argv[1], argv[2], json.loads(argv[3])
    os.makedirs(os.path.dirname(state_path), mode=0o755, exist_ok=True)
    fd = locked(state_path + ".lock")
    if fd is None:
        say("result", "busy", "another run holds " + state_path + ".lock")
        return
    try:
        now = time.time()
        drains = load(state_path, now)
        if drains is None:
            say("result", "unreadable", state_path + " is not a drains file")
            return
        result, why = change(drains, req, now)
        if result == "ok":
            write(state_path, json.dumps({"version": 1, "drains": drains}, sort_keys=True) + "\n")
            workers = [w for w in req["workers"] if w.get("id") not in drains]
            write(discovery, json.dumps({"version": 1, "workers": workers}, indent=1) + "\n")
        say("result", result, why)
        say("drains", str(len(drains)), shown(drains, now))
    finally:
        os.close(fd)


if __name__ == "__main__":
    main(sys.argv)

"""Alertmanager's silences of a host's rollout turn: the commands that make, change and list them, and which
of a listing are a turn's (`ours`), and when they end once the turn has (`turn_ended`). tasks/silences.py runs them.
"""

from __future__ import annotations

import datetime
import json
import re
import shlex
import time
from dataclasses import dataclass

from fleet.core.wire import Unreadable, excerpt, load_json
from fleet.monitoring.host import AUTH_CURL
from fleet.monitoring.models import Monitoring

# --- silences: no page during a rollout ------------------------------------------------------------
SILENCE_BY = "sglang-fleet"
_SILENCE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _iso(t: float) -> str:
    ms = round(t * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def silence_command(mon: Monitoring, host: str, gpu_class: str, starts: float, ends: float, comment: str,
                    sid: str | None = None) -> str:
    """A silence of every alert about `host` from now until `ends` (epoch seconds), through Alertmanager's
    API on the monitoring host; prints its answer (the silence's id). With `sid`, that silence of ours given these
    times instead (Alertmanager changes it in place, or expires it and answers the id of its replacement)."""
    if sid is not None and not _SILENCE_ID.fullmatch(sid):
        raise ValueError(f"not a silence id: {sid!r}")
    body = {"matchers": [{"name": "host", "value": host, "isRegex": False, "isEqual": True},
                         {"name": "gpu_class", "value": gpu_class, "isRegex": False, "isEqual": True}],
            "startsAt": _iso(starts), "endsAt": _iso(ends), "createdBy": SILENCE_BY, "comment": comment,
            **({"id": sid} if sid is not None else {})}
    return (f"{AUTH_CURL} -s --max-time 10 -X POST -H 'Content-Type: application/json' "
            f"-d {shlex.quote(json.dumps(body))} "
            f"{shlex.quote(mon.url(mon.alertmanager_port, '/api/v2/silences'))}")


def silence_id(answer: str) -> str:
    """The id in Alertmanager's answer to a new silence ({"silenceID": "..."}); Unreadable otherwise."""
    doc = load_json(answer, "Alertmanager's answer to a new silence")
    sid = doc.get("silenceID") if isinstance(doc, dict) else None
    if not isinstance(sid, str) or not _SILENCE_ID.fullmatch(sid):
        raise Unreadable(f"Alertmanager's answer to a new silence: expected a silenceID, found {excerpt(answer)}")
    return sid


@dataclass(frozen=True)
class Silence:
    """A silence of a host's turn in Alertmanager, made by this run or by one killed before its turn ended."""

    id: str
    starts: float  # epoch seconds
    ends: float


def silences_command(mon: Monitoring, host: str) -> str:
    """Alertmanager's silences with a host="<host>" matcher, any state, as its API answers them (a JSON list)."""
    return (f"{AUTH_CURL} -s --max-time 10 -G --data-urlencode {shlex.quote(f'filter=host={json.dumps(host)}')} "
            f"{shlex.quote(mon.url(mon.alertmanager_port, '/api/v2/silences'))}")


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z")


def _epoch(text) -> float | None:
    """Alertmanager's UTC timestamp (RFC 3339, Z) as epoch seconds; None for anything else."""
    m = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        return None
    try:
        whole = datetime.datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
    except ValueError:  # a day or an hour out of range
        return None
    return whole + float(f"0.{m.group(2) or 0}")


def ours(answer: str, host: str, gpu_class: str) -> list[Silence]:
    """Of Alertmanager's silences (silences_command's answer), those of a turn of `host`, whichever run made them: by
    SILENCE_BY, on exactly the host's and its class's labels (silence_command's matchers), active or pending.
    An answer that is not a list of silences: Unreadable; a silence not of that shape is not ours."""
    doc = load_json(answer, "Alertmanager's silences")
    if not isinstance(doc, list):
        raise Unreadable(f"Alertmanager's silences: expected a list, found {excerpt(answer)}")
    turn = [("gpu_class", gpu_class), ("host", host)]
    found = []
    for s in doc:
        if not isinstance(s, dict) or s.get("createdBy") != SILENCE_BY or not isinstance(s.get("status"), dict) \
                or s["status"].get("state") not in ("active", "pending") or not isinstance(s.get("matchers"), list):
            continue
        matchers = s["matchers"]
        if not all(isinstance(m, dict) and m.get("isRegex") is False and m.get("isEqual", True) is True
                   for m in matchers) or sorted((str(m.get("name")), str(m.get("value"))) for m in matchers) != turn:
            continue
        sid, starts, ends = s.get("id"), _epoch(s.get("startsAt")), _epoch(s.get("endsAt"))
        if isinstance(sid, str) and _SILENCE_ID.fullmatch(sid) and starts is not None and ends is not None:
            found.append(Silence(sid, starts, ends))
    return found


def turn_ended(silences: list[Silence], now: float, mon: Monitoring) -> dict[str, float]:
    """When each silence of a host whose turn ended `now` is to end (id -> epoch seconds): once its alerts have
    resolved (resolve_s from now), sooner than the turn bound it was made with, later than a turn that took
    nearly that bound left it; none outlives its turn by more."""
    return {s.id: now + mon.resolve_s() for s in silences}

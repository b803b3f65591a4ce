"""`make monitor`'s view: what the monitoring host scrapes, what fires and what is silenced, from Prometheus' and
Alertmanager's answers, each read as untrusted.
"""

from __future__ import annotations

from fleet.core.wire import Unreadable, capped, shown
from fleet.monitoring.host import _objects

# --- make monitor -----------------------------------------------------------------------------------
MONITOR_LISTED = 100  # lines of each of make monitor's lists (targets, alerts, silences): a server may say any number


def _labels(item: dict) -> dict:
    """An item's labels, none where it has none or they are not of that shape (the item is still shown)."""
    labels = item.get("labels")
    return labels if isinstance(labels, dict) else {}


def describe_monitor(host: str, link: str, targets_json: str, alerts_json: str, silences_json: str) -> str:
    """What the monitoring host scrapes (and whether each answers), what fires, what is silenced, and where
    to look: Prometheus' answers (/api/v1/targets, /api/v1/alerts) and Alertmanager's (/api/v2/silences),
    each read as untrusted: one that does not read is said, the others still shown; an item that is not an
    object is counted; every value shown printable and bounded (wire.shown), each list at most MONITOR_LISTED."""
    out = [f"{host}: Prometheus {link}"]

    def read(text: str, what: str, path: tuple[str, ...], expected: str) -> tuple[list[dict] | None, str]:
        try:
            items, odd = _objects(text, what, path, expected)
        except Unreadable as e:
            out.append(f"  {host}: unreadable: {e}")
            return None, ""
        return items, f"; {odd} unreadable (expected an object each)" if odd else ""

    def target(t: dict) -> str:
        lab = _labels(t)
        why = f" ({shown(t.get('lastError'), 120)})" if t.get("lastError") else ""
        return (f"  {shown(lab.get('job', '?')):<12} {shown(lab.get('host', '-')):<16} "
                f"{shown(t.get('scrapeUrl', '?'))}  {shown(t.get('health', '?'))}{why}")

    def alert(a: dict) -> str:
        lab, said = _labels(a), a.get("annotations")
        summary = said.get("summary", "") if isinstance(said, dict) else ""
        return (f"  {shown(lab.get('alertname', '?'))} {shown(lab.get('host', '-'))} "
                f"({shown(lab.get('severity', '?'))}) since {shown(a.get('activeAt', '?'))}: {shown(summary, 200)}")

    def silence(s: dict) -> str:
        matchers = s.get("matchers") if isinstance(s.get("matchers"), list) else []
        on = ", ".join(f"{shown(m.get('name', '?'))}={shown(m.get('value', '?'))}" if isinstance(m, dict) else "?"
                       for m in matchers[:MONITOR_LISTED])
        return (f"  {shown(on, 200)} until {shown(s.get('endsAt', '?'))} by {shown(s.get('createdBy', '?'))}: "
                f"{shown(s.get('comment', ''), 200)}")

    targets, odd = read(targets_json, "Prometheus' targets", ("data", "activeTargets"),
                        '{"data": {"activeTargets": [...]}}')
    if targets is not None:
        up = [t for t in targets if t.get("health") == "up"]
        out.append(f"scraped: {len(targets)} targets, {len(up)} up{odd}")
        order = sorted(targets, key=lambda t: (str(_labels(t).get("job", "")), str(_labels(t).get("host", ""))))
        out += capped(order, MONITOR_LISTED, target)
    alerts, odd = read(alerts_json, "Prometheus' alerts", ("data", "alerts"), '{"data": {"alerts": [...]}}')
    if alerts is not None:
        firing_now = [a for a in alerts if a.get("state") == "firing"]
        out.append(f"firing: {len(firing_now)}" + (f" (and {len(alerts) - len(firing_now)} pending)"
                                                    if len(alerts) > len(firing_now) else "") + odd)
        out += capped(firing_now, MONITOR_LISTED, alert)
    silences, odd = read(silences_json, "Alertmanager's silences", (), "a list of silences")
    if silences is not None:
        active = [s for s in silences if isinstance(s.get("status"), dict) and s["status"].get("state") == "active"]
        out.append(f"silenced: {len(active)} active{odd}")
        out += capped(active, MONITOR_LISTED, silence)
    return "\n".join(out)

"""Property tests: whatever a host or server says, every view shows it printable and bounded (issue 38, item 3).

make status (its table: the rows, the reasons under them, the `firing:` lines, the gateway rows), make monitor,
make history and make dry's diffs, each fed arbitrary JSON of any shape and arbitrary text: control characters
(ESC, CSI, OSC, C1), line and paragraph separators, bidirectional overrides, lone surrogates (JSON's \\ud800
escapes), and answers of 4 MiB. No view may raise, print a character a terminal acts on, or make a line or a
list longer than its bound; an answer of an unexpected shape is said as unreadable, naming the host, beside
what could be read. Sizes are asserted, never the clock.
"""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.gateway.smg import Replica
from fleet.rollout.history import BACKUPS_SHOWN, Backup, History, Record, describe_history
from fleet.monitoring.host import PACKAGES, UNITS, MonitoringHost, firing
from fleet.monitoring.views import MONITOR_LISTED, describe_monitor
from fleet.rollout.parse import FileState
from fleet.rollout.plan import DIFF_SHOWN, describe_diff
from fleet.rollout.status import REASONS_SHOWN, HostStatus, judge_gateway, judge_monitoring, table, with_alerts, \
    with_floating
from fleet.core.wire import BLOCK_LIMIT, CELL, LINE, Unreadable, capped, shown
from test_floating import gateway, status_read

PROFILE = settings(derandomize=True, database=None, deadline=None, max_examples=100,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unsafe(ch: str) -> bool:
    """A character a terminal acts on, or one that breaks a line or cannot be printed."""
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") or ch in BIDI


def assert_shown(text: str, width: int, most_lines: int | None = None) -> list[str]:
    """Every line of a view printable (and encodable: print would raise on a lone surrogate) and at most `width`."""
    lines = text.split("\n")
    for line in lines:
        assert not any(map(unsafe, line)), ascii(line[:200])
        assert len(line) <= width, (len(line), ascii(line[:200]))
        line.encode("utf-8")
    if most_lines is not None:
        assert len(lines) <= most_lines
    return lines


# What a terminal acts on, what breaks a line, what cannot be printed, and what int() and float() read oddly.
NASTY = ["\x1b[2J", "\x1b]0;owned\x07", "\x1b]8;;http://x\x1b\\", "\x9b31m", "\x85", "\x00", "\r", "\t", "\n",
         "\x7f", "\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\ud800", "\udfff", "\ufeff", "\u00b2", "nan", "",
         "-", "firing", "active", "up", "ready"]
HUGE = [c * (BLOCK_LIMIT // len(c.encode("utf-8", "surrogatepass"))) for c in ("\x1b[2J", "A", "\u202e", "\ud800")]
any_char = st.characters(exclude_categories=())  # surrogates too
small_text = st.one_of(st.sampled_from(NASTY), st.text(any_char, max_size=12),
                       st.lists(st.sampled_from(NASTY), max_size=6).map("".join))


def among(values: list[str]):
    """One of these values, drawn by index: a strategy over 4 MiB strings must not repr them (hypothesis does)."""
    return st.integers(0, len(values) - 1).map(lambda i: values[i])


text = st.one_of(small_text, small_text, small_text, among(HUGE))  # 4 MiB now and then
leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False), small_text)
json_any = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(small_text, inner, max_size=4)), max_leaves=16)


def big(shape: object) -> str:
    """A MiB-sized answer of this shape: each string leaf ("*") 200,000 characters of escapes a terminal acts on
    (600 kB of JSON, as its \\u escapes)."""
    return json.dumps(shape).replace('"*"', json.dumps("\x1b]0;\u202e" * (BLOCK_LIMIT // 100)))


def near(value, odd=json_any):
    """Mostly `value`, one time in four something else of any shape."""
    return st.one_of(st.just(value), st.just(value), st.just(value), odd)


LABELS = st.one_of(*[st.fixed_dictionaries({
    "job": near("sglang", small_text), "host": near("p1", small_text), "alertname": near("X", small_text),
    "severity": near("warning", small_text)})] * 3, json_any)
TARGET = st.fixed_dictionaries({"labels": LABELS, "scrapeUrl": near("http://10.0.0.1:30000/metrics", small_text),
                                "health": near("up", small_text),
                                "lastError": near("", small_text)})
ALERT = st.fixed_dictionaries({"labels": LABELS, "state": near("firing", small_text),
                               "activeAt": near("2026", small_text),
                               "annotations": near({"summary": "x"}, st.fixed_dictionaries({"summary": small_text}))})
SILENCE = st.fixed_dictionaries({"status": near({"state": "active"}), "endsAt": near("2026", small_text),
                                 "matchers": near([{"name": "host", "value": "p2"}], st.lists(st.fixed_dictionaries(
                                     {"name": small_text, "value": small_text}), max_size=3)),
                                 "createdBy": near("sglang-fleet", small_text), "comment": near("", small_text)})


def answer(shape, *huge: str):
    """A server's answer: JSON of this shape (its items near theirs), of any other shape, cut short, or text;
    now and then one of `huge`."""
    return st.one_of(shape.map(json.dumps), shape.map(json.dumps), json_any.map(json.dumps),
                     shape.map(lambda d: json.dumps(d)[:-1]), text, *([among(list(huge))] if huge else []))


TARGETS = answer(st.fixed_dictionaries({"data": st.one_of(
    st.fixed_dictionaries({"activeTargets": st.lists(st.one_of(TARGET, TARGET, json_any), max_size=4)}), json_any)}),
    big({"data": {"activeTargets": [{"labels": {"job": "*", "host": "*"}, "scrapeUrl": "*", "lastError": "*"}]}}))
ALERTS = answer(st.fixed_dictionaries({"data": st.one_of(
    st.fixed_dictionaries({"alerts": st.lists(st.one_of(ALERT, json_any), max_size=4)}), json_any)}),
    big({"data": {"alerts": [{"labels": {"alertname": "*", "host": "*"}, "state": "firing", "activeAt": "*",
                              "annotations": {"summary": "*"}}]}}))
SILENCES = answer(st.one_of(st.lists(st.one_of(SILENCE, json_any), max_size=4), json_any),
                  big([{"status": {"state": "active"}, "matchers": [{"name": "*", "value": "*"}], "comment": "*",
                        "createdBy": "*"}]))

MONITOR_WIDTH = 1000  # the widest line describe_monitor builds: a handful of values, each at most CELL or 200
MONITOR_LINES = 4 + 3 * (MONITOR_LISTED + 1)
ROW_WIDTH = 13 * (CELL + 2)  # make status's row: 13 cells of at most CELL, two spaces apart
UNDER_WIDTH = LINE + 4


@PROFILE
@given(TARGETS, ALERTS, SILENCES, text)
def test_make_monitor_shows_any_answer_printable_and_bounded(targets, alerts, silences, host):
    out = describe_monitor("mon-1", "http://10.0.0.5:9090/alerts", targets, alerts, silences)
    lines = assert_shown(out, MONITOR_WIDTH, MONITOR_LINES)
    assert lines[0] == "mon-1: Prometheus http://10.0.0.5:9090/alerts"
    # each answer is either read (its heading) or said unreadable, naming the host: never dropped silently
    for heading, what in (("scraped: ", "Prometheus' targets"), ("firing: ", "Prometheus' alerts"),
                          ("silenced: ", "Alertmanager's silences")):
        assert sum(line.startswith((heading, f"  mon-1: unreadable: {what}")) for line in lines) == 1


UP = MonitoringHost({p: "2.42.0" for p in PACKAGES}, "0" * 16, {}, {u: "active" for u in UNITS})
GATEWAY_READ = st.fixed_dictionaries({
    "unit": st.one_of(st.just("ActiveState=active\nSubState=running\nUnitFileState=enabled"),
                      st.tuples(text, text, text).map(lambda t: "\n".join(
                          f"{k}={v}" for k, v in zip(("ActiveState", "SubState", "UnitFileState"), t)))),
    "installed": near("1.13.0", text), "readiness": near("200", text),
    "workers": answer(st.fixed_dictionaries({"workers": st.lists(st.fixed_dictionaries({
        "url": near("http://10.0.0.1:30000", small_text), "status": near("ready", small_text)}),
        max_size=3)}), big({"workers": [{"url": "*", "status": "*"}]})),
    "vrrp-state": near("MASTER 1.0", text), "vrrp-address": near("eth0", text), "vrrp-forward": near("", text),
    "vrrp-connections": near("3", text), "vrrp-active": near("active", text)})
def encodable(strategy):
    """A record's text: what a host's record can hold (pydantic refuses lone surrogates, the record is unreadable)."""
    return strategy.map(lambda t: t.encode("utf-8", "replace").decode())


RECORD = st.builds(Record, time=st.integers(0, 2**40 - 1), by=encodable(text.map(lambda t: t[:256])),
                   result=encodable(small_text), kind=st.sampled_from(["deploy", "rollback", "tune"]),
                   to=encodable(small_text), commit=encodable(small_text),
                   action=encodable(text.map(lambda t: t[:4096])),
                   algorithm=encodable(small_text), served_model=encodable(small_text), engine=encodable(small_text),
                   weights=encodable(small_text), reason=encodable(text.map(lambda t: t[:4096])))


def hostile_row(host: str, t: list[str], record) -> HostStatus:
    """A row of any text in every cell and line, as a host's answer could make it."""
    return HostStatus(host, t[0], t[1], t[2], t[3], 0, t[4], t[5], t[6], t[7], None, float("1e300"), record,
                      drift=t[8], tuning=t[9], reasons=t[10:], alerts=t[:3])


@PROFILE
@given(st.lists(GATEWAY_READ, min_size=1, max_size=2), ALERTS, text, st.lists(text, min_size=10, max_size=14),
       st.one_of(st.none(), RECORD))
def test_make_status_shows_any_answer_printable_and_bounded(reads, alerts, ready, texts, record):
    gw = gateway()
    replicas = [Replica("p1", "pro6000", "m", "http://10.0.0.1:30000")]
    rows = [judge_gateway(f"gw-{i}", "gateway", gw, {**status_read("MASTER", True), **r}, replicas)
            for i, r in enumerate(reads)]
    rows.append(judge_monitoring("mon-1", "monitoring", UP, ready, alerts, "0" * 16))
    rows.append(hostile_row("p1", texts, record))
    rows = with_floating(with_alerts(rows))
    lines = assert_shown(table(rows), ROW_WIDTH)
    assert len(lines) <= 2 + len(rows) * (1 + 1 + REASONS_SHOWN + 1 + 2)
    assert all(len(line) <= UNDER_WIDTH for line in lines if line.startswith("    "))


@PROFILE
@given(st.lists(RECORD, max_size=5), st.lists(st.tuples(st.dictionaries(text, st.just(FileState("644", "r:r", "a")),
                                                                      max_size=3), text), max_size=3), text)
def test_make_history_shows_any_record_printable_and_bounded(records, backups, name):
    history = History(records, [Backup(f"2026010{i}T000000Z", files, spec) for i, (files, spec) in enumerate(backups)])
    assert_shown(describe_history("h1", history), LINE + 2, 3 + len(records) + 2 + BACKUPS_SHOWN + 1)


@PROFILE
@given(text, text)
def test_make_dry_shows_any_hosts_file_printable_and_bounded(on_host, declared):
    lines = assert_shown(describe_diff("/etc/x", on_host, declared), LINE, 1 + DIFF_SHOWN + 1)
    assert lines[0] == "Will change /etc/x"


@PROFILE
@given(ALERTS)
def test_firing_reads_any_answer_or_refuses_it_as_unreadable(alerts):
    try:
        found, odd = firing(alerts)
    except Unreadable as e:
        assert str(e).startswith("Prometheus' /api/v1/alerts: ")
        return
    assert odd >= 0
    for where, names in found.items():
        assert len(where) <= 256 and all(len(n) <= CELL and not any(map(unsafe, n)) for n in names)


# --- the shapes and sizes the issue found, each pinned ------------------------------------------------

def test_make_monitor_reads_valid_json_of_another_shape_beside_what_it_can():
    """A target that is a number, labels that are a list, alerts [null], silences an object: said, not raised."""
    targets = json.dumps({"data": {"activeTargets": [3, {"labels": ["job", "sglang"], "health": "up"}]}})
    out = describe_monitor("mon-1", "link", targets, json.dumps({"data": {"alerts": [None]}}),
                           json.dumps({"a": 1})).splitlines()
    assert out[1:] == [
        "scraped: 1 targets, 1 up; 1 unreadable (expected an object each)",
        "  ?            -                ?  up",
        "firing: 0; 1 unreadable (expected an object each)",
        """  mon-1: unreadable: Alertmanager's silences: expected a list of silences, found '{"a": 1}'"""]


def test_a_4_mib_alert_name_and_label_give_bounded_lines_everywhere():
    big = "\x1b]0;" + "A" * BLOCK_LIMIT
    alerts = json.dumps({"data": {"alerts": [{"labels": {"alertname": big, "host": "p1", "severity": big},
                                              "state": "firing", "annotations": {"summary": big}}]}})
    rows = with_alerts([judge_monitoring("mon-1", "monitoring", UP, "200 1 200 1", alerts, "0" * 16),
                        HostStatus("p1")])
    (firing_line,) = [line for line in table(rows).splitlines() if line.startswith("    firing: ")]
    assert firing_line.startswith("    firing: \ufffd]0;AAA") and len(firing_line) <= UNDER_WIDTH
    monitor = describe_monitor("mon-1", "link", "", alerts, "[]")
    assert_shown(monitor, MONITOR_WIDTH)
    assert len(monitor) < 2000


def test_one_gateways_4_mib_substate_and_version_do_not_pad_the_table():
    """The issue's 21 rows of 96 million characters: the gateway's values are refused as unreadable, quoted short."""
    big = "\x9b" + "x" * BLOCK_LIMIT
    read = {**status_read("MASTER", True), "unit": f"ActiveState=active\nSubState={big}\nUnitFileState=enabled",
            "installed": big}
    rows = [judge_gateway("gw-1", "gateway", gateway(), read, [])] + [HostStatus(f"p{i}") for i in range(20)]
    text = table(with_floating(rows))
    assert len(text) < 21 * 200 + 2000
    row = rows[0]
    assert row.unit == "active (?), enabled" and row.sglang == "smg ?" and row.drift == "install smg 1.13.0"
    assert any(r.startswith("gw-1: unreadable: systemctl show's SubState: expected a unit state") for r in row.reasons)
    assert any(r.startswith("gw-1: unreadable: smg's version: expected a version such as 1.13.0, found '\ufffdxxx")
               for r in row.reasons)


def test_make_monitor_lists_at_most_its_bound_of_a_4_mib_answer():
    target = {"labels": {"job": "sglang", "host": "p"}, "scrapeUrl": "u", "health": "up"}
    count = BLOCK_LIMIT // len(json.dumps(target) + ", ") - 1
    many = json.dumps({"data": {"activeTargets": [target] * count}})
    assert len(many) <= BLOCK_LIMIT
    lines = assert_shown(describe_monitor("mon-1", "link", many, "", ""), MONITOR_WIDTH, MONITOR_LINES)
    assert lines[1] == f"scraped: {count} targets, {count} up"
    assert lines[2 + MONITOR_LISTED] == f"... and {count - MONITOR_LISTED} more"


def test_a_4_mib_line_of_a_hosts_file_gives_a_bounded_diff():
    lines = describe_diff("/etc/x", "\x1b[2J" * (BLOCK_LIMIT // 4) + "\n" + "y\n" * 10_000, "x\n").split("\n")
    assert len(lines) == 1 + DIFF_SHOWN + 1 and all(len(line) <= LINE for line in lines)
    assert lines[4].startswith("-\ufffd[2J") and lines[-1].endswith("more")


@pytest.mark.parametrize("said, expected", [
    ("\x1b[31mred\x1b[0m", "\ufffd[31mred\ufffd[0m"),
    ("a\nb\tc\u2028d\u202ee\ud800f\x85", "a\ufffdb\ufffdc\ufffdd\ufffde\ufffdf"),  # stripped: NEL is a space
    (["a", 1], "['a', 1]"),
    (None, "None"),
    ("  x" + "y" * 500, "x" + "y" * 96 + "..."),
])
def test_shown_is_one_printable_bounded_line(said, expected):
    assert shown(said) == expected


def test_capped_says_how_many_it_left_out():
    assert capped(["a", "b"], 2) == ["a", "b"] and capped(["a", "b", "c"], 2) == ["a", "b", "... and 1 more"]


def test_make_status_says_an_answer_of_another_shape_as_unreadable_naming_the_host():
    read = {**status_read("MASTER", True), "workers": json.dumps({"workers": {"url": "x"}})}
    row = judge_gateway("gw-1", "gateway", gateway(), read, [])
    assert """gw-1: unreadable: /workers: expected {"workers": [{"url", "status"}, ...]}, found '{"workers": """ \
        """{"url": "x"}}'""" in row.reasons
    alerts = json.dumps({"data": {"alerts": [None, {"labels": {"alertname": "A", "host": "p1"}, "state": "firing"}]}})
    row = judge_monitoring("mon-1", "monitoring", UP, "200 1 200 1", alerts, "0" * 16)
    assert row.firing == {"p1": ["A"]}  # what reads, beside what does not
    assert row.reasons == ["mon-1: unreadable: 1 of Prometheus' /api/v1/alerts (expected an object with labels, "
                           "a string alertname and host)"]
    row = judge_monitoring("mon-1", "monitoring", UP, "200 1 200 1", '{"data": []}', "0" * 16)
    assert row.reasons == ["""mon-1: unreadable: Prometheus' /api/v1/alerts: expected {"data": {"alerts": [...]}}, """
                           """found '{"data": []}'"""]


def test_keepalived_state_of_another_shape_is_unreadable_naming_the_gateway():
    read = {**status_read("MASTER", True), "vrrp-state": "\x1b[2JPWNED 1"}
    row = judge_gateway("gw-1", "gateway", gateway(), read, [])
    assert row.verdict == "UNHEALTHY" and row.floating["state"] == "-"
    assert "- floating address 10.0.0.100: gw-1: unreadable: vrrp state '\ufffd[2JPWNED 1' is not one of MASTER" \
        in table([row])

"""Property tests: whatever a host answers, every reader returns a typed value or a refusal.

Each generated answer is what a real host's command prints (the records of that reader, in
order), with some of it made odd: a field replaced by a Unicode digit, a number beyond a float,
NaN, a control character or a marker line; JSON of another shape, cut short or nested deep; a
data line that is not base64, or missing; a record that should not be there. No reader may
raise anything but its documented refusal (fleet.core.wire.Unreadable, or ValueError for the
pending record), and nothing the deploy decides from a snapshot (guards, lock, plan, the
summary's words, make status's row) may raise either: one host's answer never stops the run.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import SPEC, converged, secrets_of, wanted
from facts.gateway import GatewayStatus
from facts.preflight import SECTIONS, HostSnapshot
from facts.status import StatusSnapshot
from fleet.rollout import guards, lock
from fleet.rollout.gate import parse_observation, parse_smoke
from fleet.gateway.models import Gateway
from fleet.gateway.smg import parse_gateway_host, parse_workers
from fleet.rollout.history import Backup, parse_history
from fleet.rollout.prerequisites import parse_probe
from fleet.rollout.parse import (
    file_state,
    parse_deploy_state,
    parse_service_runtime,
    parse_systemd_version,
    parse_unit_states,
)
from fleet.weights.parse import parse_config, parse_model_dirs
from fleet.engine.parse import parse_engine
from fleet.rollout.gpus import parse_gpu_inventory, parse_gpu_processes
from fleet.rollout.plan import plan
from fleet.rollout.pending import read_pending
from fleet.core.report import describe_gpu_list
from fleet.rollout.status import judge, judge_gateway, parse_metrics
from fleet.core.wire import frames, load_json, sections

PROFILE = settings(derandomize=True, database=None, deadline=None, max_examples=200,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# What has broken readers before, and what could: Unicode digits (int() takes some, not others),
# numbers beyond a float, NaN, control characters, separators, marker lines, CSV commas.
ODD = ["[not set]", "[N/A]", "\u0661\u0662", "\u00b2", "\uff15", "1e400", "1e20", "nan", "NaN", "-inf", "-1",
       "9" * 30, "0x10", "", " ", "\x00", "\x1b[2J", "\u2028", "\ufeff", "@@section=gpus", "@@nvidia-smi=0", "a,b,c"]
odd_text = st.one_of(st.sampled_from(ODD), st.text(max_size=8))
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(),
                      odd_text)
json_any = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(odd_text, inner, max_size=3)), max_leaves=12)


def near(value):
    """Mostly `value`, as a real host has it; one time in six something odd in its place."""
    odd = odd_text if isinstance(value, str) else st.one_of(json_leaf, json_any)
    return st.one_of(*[st.just(value)] * 5, odd)


def joined(sep: str, *parts):
    return st.tuples(*parts).map(lambda p: sep.join(map(str, p)))


def rows(*fields):
    return st.lists(joined(", ", *map(near, fields)), min_size=1, max_size=3).map("\n".join)


def dumped(**shape):
    """A JSON document of this shape, each leaf near its value; or cut short, or nested deep."""
    doc = st.fixed_dictionaries({k: v if isinstance(v, st.SearchStrategy) else near(v) for k, v in shape.items()})
    return st.one_of(*[doc.map(json.dumps)] * 4, doc.map(lambda d: json.dumps(d)[:-1]),
                     st.integers(1, 3000).map(lambda n: "[" * n + "]" * n), json_any.map(json.dumps))


def props(**values):
    return joined("\n", *(joined("=", st.just(k), near(v)) for k, v in values.items()))


SHA1 = "a" * 40
STAT = joined("\n", joined(" ", near("644"), near("root:root")), near(SHA1))
GPU_ROWS = rows("0", "NVIDIA H200", "GPU-1", "143771", "580.159.03", "00000000:19:00.0", "Disabled")
APP_ROWS = rows("4242", "python", "30512", "GPU-1")
HELP = st.lists(st.sampled_from([
    "  --model-path MODEL_PATH, --model MODEL_PATH", "  --speculative-algorithm SPECULATIVE_ALGORITHM",
    "                        Speculative algorithm. Builtins: EAGLE, DFLASH, \u0661, ../x",
    "  --speculative-algorithm {EAGLE,DFLASH,a b,\u00b2}", "  -", "  --a, --b  help", "options:"]), max_size=6).map("\n".join)
UNIT_SHOW = props(Id="sglang.service", LoadState="loaded", ActiveState="active", SubState="running", MainPID="4242",
                  NRestarts="0", UnitFileState="enabled", ExecMainStatus="0", NeedDaemonReload="no")
CONFIG = dumped(architectures=["DFlashDraftModel"], model_type="qwen3", vocab_size=248320, hidden_size=5120,
                num_hidden_layers=5, block_size=16, dflash_config={"block_size": 16},
                text_config={"vocab_size": 248320, "mtp_num_hidden_layers": 1}, num_nextn_predict_layers=1)
UNIT_BEFORE = {"enabled": "enabled", "active": "active"}
PENDING = dumped(version=1, phase="rolling-out", since=1_700_000_000, by="me", target=SHA1, restart=True, reason="",
                 before=st.fixed_dictionaries({
                     "files": near({"/etc/systemd/system/sglang.service": SHA1, "/etc/sglang/sglang.env": None}),
                     "backup": near("20260101T000000Z"), "service": near(UNIT_BEFORE),
                     "workloads": near({"dflash-train.service": UNIT_BEFORE})}))
LOCK = dumped(holder="a@b", pid=1, since=1_700_000_000, session=12, session_start=345)
RECORD = dumped(time=1_700_000_000, by="a@b", result="ok", kind="deploy", commit="0123abc", dirty=False, action="x")
CHAT = joined("\n", dumped(choices=[{"message": {"content": "hi", "reasoning_content": None}}],
                           usage={"completion_tokens": 5}),
              joined(" ", joined("=", st.just("http"), near("200")), joined("=", st.just("time"), near("0.25"))))
SERVER_INFO = dumped(internal_states=[{"avg_spec_accept_length": 2.5}])
WORKERS = dumped(workers=[{"url": "http://10.0.0.1:30000", "status": "ready"}])
METRICS = st.lists(joined(" ", near("sglang:num_running_reqs"), near("1.0")), max_size=3).map("\n".join)


def rec(key: str, value, text=None):
    """One record as the command prints it; now and then its data line broken or missing."""
    value = value if isinstance(value, st.SearchStrategy) else st.just(value)
    text = st.none() if text is None else text

    def frame(parts) -> str:
        v, t, broken = parts
        marker = f"@@{key}" + (f"={v}" if v else "")
        if broken is not None:
            return f"{marker}\n{broken}" if broken else marker
        return marker if t is None else f"{marker}\n{base64.b64encode(t.encode('utf-8', 'surrogatepass')).decode()}"

    broken = st.one_of(*[st.none()] * 8, st.sampled_from(["", "%%%", "@@", "not base64!", "QUJD==="]))
    return st.tuples(value, text, broken).map(frame)


def answer(*records):
    """The records in order, sometimes one dropped or a stray one added."""
    def shape(parts) -> str:
        body, drop, stray = parts
        body = [r for i, r in enumerate(body) if i != drop]
        return "\n".join(body + ([stray] if stray else []))
    return st.tuples(st.tuples(*records), st.integers(-1, len(records) + 3),
                     st.one_of(*[st.none()] * 4, rec("section", near("gpus")), rec("nvidia-smi", "0", GPU_ROWS)),
                     ).map(shape)


# Each reader, and what its command prints.
ANSWERS = {
    parse_gpu_inventory: answer(rec("nvidia-smi", near("0"), GPU_ROWS), rec("stderr", "", near("WARNING: x"))),
    parse_gpu_processes: answer(rec("nvidia-smi", near("0"), APP_ROWS), rec("stderr", "", near("")),
                                rec("cgroup", near("4242"), near("0::/system.slice/dflash-train.service"))),
    parse_engine: st.one_of(answer(rec("version", near("0"), near("0.5.23")), rec("help", near("0"), HELP)),
                            answer(rec("launcher", near("missing"))),
                            answer(rec("engine-cache", near("hit"), answer(
                                rec("version", near("0"), near("0.5.23")), rec("help", near("0"), HELP))))),
    parse_model_dirs: answer(rec("path", near("/m/t")), rec("config", near("0"), CONFIG),
                             rec("path", near("/m/d")), rec("missing", near("directory"))),
    parse_unit_states: answer(rec("unit", near("sglang.service")), rec("systemctl", near("0"), UNIT_SHOW)),
    parse_deploy_state: answer(rec("file", near("/etc/systemd/system/sglang.service"), STAT),
                               rec("dir", near("/etc/sglang"), joined(" ", near("700"), near("root:root"))),
                               rec("content", near("/etc/systemd/system/sglang.service"), near("[Unit]\n")),
                               rec("lock", near("present"), LOCK), rec("lock-session", "", near("345")),
                               rec("pending", near("present"), PENDING)),
    parse_service_runtime: answer(rec("cmdline", near("4242"), joined("\n", near("/opt/sglang/bin/python"),
                                                                      near("--api-key"), near("***"))),
                                  rec("dropin", "", joined("\n", near("/etc/x.conf"), near("KillMode=process"))),
                                  rec("health", "", near("200"))),
    parse_systemd_version: answer(rec("systemd", "", joined(" ", near("systemd"), near("252"), near("(252.39)")))),
    parse_history: answer(rec("records", "", st.lists(RECORD, max_size=3).map("\n".join)),
                          rec("backup", "", near("20260101T000000Z")),
                          rec("bfile", "", joined("\n", near("sglang.service"), STAT)),
                          rec("bspec", "", dumped(group="pro6000", spec={"gpu_class": {}}))),
    parse_gateway_host: answer(rec("python", "", near("3.11")), rec("machine", "", near("x86_64")),
                               rec("smg", "", near("1.13.0"))),
    parse_smoke: answer(rec("chat", near("0"), CHAT), rec("server-info", "", SERVER_INFO)),
    parse_probe: answer(rec("program", near("curl"), near("/usr/bin/curl")), rec("program", near("ss"), near(""))),
}
SNAPSHOT = {"gpus": parse_gpu_inventory, "gpu_processes": parse_gpu_processes, "engine": parse_engine,
            "models": parse_model_dirs, "units": parse_unit_states, "deployed": parse_deploy_state,
            "runtime": parse_service_runtime, "systemd_version": parse_systemd_version, "history": parse_history,
            "programs": parse_probe}
assert set(SNAPSHOT) >= set(SECTIONS)
snapshots = st.tuples(*(ANSWERS[parser].map(lambda body, name=name: f"@@section={name}\n{body}")
                        for name, parser in SNAPSHOT.items()),
                      rec("section", "metrics").map(lambda m: m), answer(rec("metrics", "", METRICS)),
                      ).map("\n".join)
CONTENT = st.one_of(CONFIG, PENDING, LOCK, RECORD, CHAT, SERVER_INFO, WORKERS, METRICS, UNIT_SHOW, STAT,
                    st.text(), odd_text)


@pytest.mark.parametrize("parser", list(ANSWERS), ids=lambda p: p.__name__)
@PROFILE
@given(data=st.data())
def test_every_fact_parser_returns_its_type_whatever_it_reads(parser, data):
    text = data.draw(ANSWERS[parser])
    parser(text)
    parser(text.split("\n"))  # as pyinfra hands it over
    frames(text)
    sections(text)


@PROFILE
@given(CONTENT)
def test_every_content_reader_returns_a_value_or_its_refusal(text):
    parse_config("/m", text)
    parse_metrics(text)
    parse_observation(text)
    for reader in (lambda: read_pending(text, SPEC), lambda: parse_workers(text), lambda: file_state(text),
                   lambda: load_json(text, "x")):
        try:
            reader()
        except ValueError:  # Unreadable is one
            pass
    lock.describe(text)
    lock.judge(lock.LockFacts(True, text, text[:20]), "/run/x.lock", 1.0e9, 3600)
    Backup("20260101T000000Z", {}, text).summary()


@PROFILE
@given(snapshots)
def test_what_the_deploy_decides_from_any_snapshot_never_raises(answer_text):
    """Preflight's verdicts, the lock, the plan, the summary's words and make status's row."""
    lines = answer_text.split("\n")
    facts = HostSnapshot().process(lines)
    guards.preflight("h", SPEC, facts)
    guards.drain_warnings("h", SPEC, facts)
    lock.judge(facts.deployed.lock, "/run/x.lock", 1.0e9, 3600)
    describe_gpu_list(facts.gpus.gpus)
    try:
        interrupted = read_pending(facts.deployed.pending, SPEC) if facts.deployed.pending else None
    except ValueError:
        interrupted = None
    plan(SPEC, wanted(SPEC), facts, interrupted, "20260101T000000Z", 1, "me").action()
    facts, history, metrics = StatusSnapshot().process(lines)
    judge("h", "pro6000", SPEC, facts, history, metrics, secrets_of(SPEC), "", 1.0e9)
    judge_gateway("gw", "gateway", Gateway(routes=["pro6000"]), GatewayStatus().process(lines), [])


def test_a_converged_hosts_snapshot_still_plans_nothing():
    # the properties above run on generated answers; this one pins that a sane host is judged sane
    facts = converged()
    assert not plan(SPEC, wanted(SPEC), facts, None, "20260101T000000Z", 1, "me").has_work
    assert guards.preflight("h", SPEC, facts) == []


# The answers a review found stopping the whole run (or make status, make history), each pinned.
REVIEWED = [
    ("gate", "MainPID=[not set]\nActiveState=active\nhealth=200"),
    ("gate", "MainPID=\u0664\u0662\nNRestarts=\u00b2\nhealth=\uff12\uff10\uff10"),
    ("metrics", "sglang:gen_throughput 1e400\nsglang:num_running_reqs NaN\nsglang:spec_accept_length 2.5"),
    ("lock", '{"holder": "a", "pid": 1, "since": NaN}'),
    ("lock", '{"holder": "a", "pid": 1, "since": 1e20}'),
    ("lock", "[" * 100_000 + "]" * 100_000),
    ("pending", '{"version": 1, "since": 1e20}'),
    ("pending", "{" + '"a": {' * 5000 + "}" * 5001),
    ("record", '{"time": 1700000000, "by": "a", "result": "ok", "commit": 5}'),
    ("record", '{"time": 1e20, "by": "a", "result": "ok"}'),
    ("config", '{"vocab_size": 1e400, "architectures": [' + "[" * 3000 + "]" * 3000 + "]}"),
]


@pytest.mark.parametrize("what, text", REVIEWED, ids=[w for w, _ in REVIEWED])
def test_the_answers_a_review_found_stopping_the_run_are_read_or_refused(what, text):
    from fleet.rollout.status import describe_record

    if what == "gate":
        assert parse_observation(text).main_pid == 0
    elif what == "metrics":
        assert parse_metrics(text) == {"sglang:spec_accept_length": 2.5}
    elif what == "lock":
        assert lock.judge(lock.LockFacts(True, text, ""), "/run/x.lock", 1.0e9, 3600).kind == "ownerless"
    elif what == "pending":
        with pytest.raises(ValueError, match="unreadable pending-rollout record"):
            read_pending(text, SPEC)
    elif what == "record":
        history = parse_history(f"@@records\n{base64.b64encode(text.encode()).decode()}\n")
        assert history.unreadable == 1 and history.records == []
        describe_record(history.last)
    elif what == "config":
        assert parse_config("/m", text).status == "unreadable"

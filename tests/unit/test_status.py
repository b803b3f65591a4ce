"""fleet.rollout.status: a host's row from one round trip's facts; drift in make dry's words."""

from __future__ import annotations

import json
from dataclasses import replace

from builders import KEYED, PRO, SPEC, converged, gpu, make_spec, secrets_of, unit

from fleet.rollout.history import History, Record
from fleet.rollout.parse import FileState, ServiceRuntime
from fleet.rollout.gpus import GpuList
from fleet.rollout.status import (
    DRIFT,
    OK,
    REFUSED,
    UNHEALTHY,
    UNREACHABLE,
    exit_code,
    judge,
    parse_metrics,
    refused,
    table,
    unreachable,
)

NOW = 1_796_040_000
METRICS = ('# HELP sglang:gen_throughput The generation throughput (token/s).\n'
           'sglang:gen_throughput{model_name="qwen3.6-27b"} 97.5\n'
           'sglang:spec_accept_length{model_name="qwen3.6-27b",engine_type="unified"} 4.7\n')
HISTORY = History([Record(NOW - 60, "alice@laptop", "ok", commit="0123456789abcdef", dirty=False)], [])


def row(facts, spec=SPEC, secrets="read", problem=""):
    return judge("h1", "pro6000", spec, facts, HISTORY, METRICS, secrets_of(spec) if secrets == "read" else secrets,
                 problem, NOW)


def test_a_converged_host_is_ok_and_says_what_it_serves():
    r = row(converged())
    assert (r.verdict, r.drift, r.reasons) == (OK, "", [])
    assert (r.gpus, r.unit, r.health) == (f"1x {PRO} at 18:00.0", "active (running), enabled", 200)
    assert (r.served_model, r.speculative) == ("qwen3.6-27b", "DFLASH (draft /root/models/Qwen3.6-27B-DFlash, block size 16)")
    assert (r.sglang, r.accept_length, r.gen_throughput) == ("0.5.23", 4.7, 97.5)
    assert r.last_deploy.by == "alice@laptop" and exit_code([r]) == 0


def test_a_hand_edited_unit_is_drift_named_as_make_dry_names_it():
    facts = converged()
    files = {**facts.deployed.files, SPEC.unit_file: FileState("644", "root:root", "0" * 40)}
    r = row(replace(facts, deployed=replace(facts.deployed, files=files)))
    assert r.verdict == DRIFT and r.drift == "update sglang.service, restart"
    assert r.reasons == ["/etc/systemd/system/sglang.service: differs from group_data"]
    assert exit_code([r]) == 1
    assert "    drift: make deploy would update sglang.service, restart" in table([r])


def test_a_stopped_service_is_unhealthy_and_its_drift_says_start():
    facts = converged()
    facts = replace(facts, units={**facts.units, SPEC.service_unit: unit(
        SPEC.service_unit, active_state="inactive", sub_state="dead", unit_file_state="enabled")},
        runtime=ServiceRuntime(None, {}, 0))
    r = row(facts)
    assert r.verdict == UNHEALTHY and r.drift == "start"
    assert r.reasons[:2] == ["/health no answer", "sglang.service is inactive (dead)"]
    assert (r.served_model, r.speculative) == ("-", "-")


def test_without_the_secrets_their_files_are_compared_by_presence_only():
    keyed = make_spec(service=KEYED)
    facts = converged(keyed)
    r = row(facts, keyed, secrets=None, problem="environment variable SGLANG_API_KEY_TEST is not set")
    assert r.verdict == OK
    assert r.reasons == ["secret files compared by presence only: environment variable SGLANG_API_KEY_TEST is not set"]
    gone = {**facts.deployed.files, keyed.config_file: None}
    r = row(replace(facts, deployed=replace(facts.deployed, files=gone)), keyed, secrets=None, problem="x")
    assert r.verdict == DRIFT and "/etc/sglang/sglang.yaml: missing" in r.reasons


def test_a_host_that_fails_a_preflight_check_is_refused_with_the_check():
    r = row(converged(gpus=GpuList("ok", (gpu(name="NVIDIA RTX A6000"),))))
    assert r.verdict == REFUSED and r.reasons == [
        f"h1: GPU model: expected {PRO}, found GPU 0: NVIDIA RTX A6000"]


def test_rows_for_hosts_never_read_and_the_json_carries_the_table_s_facts():
    rows = [row(converged()), unreachable("h2", "a6000", "Could not connect (timed out)"),
            refused("h3", "-", ["h3: gpu class: expected exactly one GPU class group, found none"])]
    assert [r.verdict for r in rows] == [OK, UNREACHABLE, REFUSED] and exit_code(rows) == 1
    text = table(rows)
    assert "    - h2: Could not connect (timed out)" in text
    data = json.loads(json.dumps([r.to_json() for r in rows]))
    assert data[0]["served_model"] == "qwen3.6-27b" and data[0]["last_deploy"]["commit"] == "0123456789abcdef"
    assert data[1] == {**data[1], "verdict": UNREACHABLE, "reasons": ["h2: Could not connect (timed out)"]}


def test_parse_metrics_takes_the_first_sample_of_each_name():
    assert parse_metrics(METRICS + "sglang:gen_throughput{model_name=\"b\"} 1\nbad line\n") == {
        "sglang:gen_throughput": 97.5, "sglang:spec_accept_length": 4.7}


def test_parse_metrics_sums_a_counters_children():
    """The real SGLang 0.5.23 counts a finished request's tokens in the child of its is_streaming value (seen
    against the real server in the lab): the first child alone missed every streamed token."""
    text = ('# TYPE sglang:generation_tokens_total counter\n'
            'sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 24.0\n'
            'sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 4.0\n'
            'sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="m"} 2.0\n')
    assert parse_metrics(text) == {"sglang:generation_tokens_total": 28.0, "sglang:num_requests_total": 2.0}

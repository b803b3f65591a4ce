"""fleet.rollout.plan: what a run does on a host, for every kind of difference from the spec (no hosts)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from builders import KEYED, SPEC, converged, make_spec, secrets_of, unit, wanted

from fleet.rollout.parse import FileState, ServiceRuntime
from fleet.rollout.gpus import GpuProcess, GpuProcessList
from fleet.rollout.pending import (
    ROLLING_BACK,
    BEGUN,
    ROLLING_OUT,
    RUNNING_STATES,
    SERVING_STATES,
    Before,
    FoundProcess,
    Held,
    Pending,
    UnitBefore,
    read_pending,
    target_of,
)
from fleet.rollout.plan import declared_files, masked_argv, plan, units_as_read, workload_of
from fleet.rollout.commands import UnitSeen, managed_paths, sha1

UNIT, ENV, SECRET = SPEC.unit_file, SPEC.env_file, SPEC.secret_file
RECORD = "/var/lib/sglang-fleet/sglang/spec.json"
STAMP, NOW, BY = "20261130T120000Z", 1_796_040_000, "alice@laptop"
CHANGED = make_spec(speculative={"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",
                                 "block_size": 8})


def plan_for(facts, spec=SPEC, interrupted=None, secrets=None):
    return plan(spec, declared_files(spec, "pro6000", facts, secrets or secrets_of(spec)), facts, interrupted, STAMP,
                NOW, BY)


def with_file(facts, path, **fields):
    files = dict(facts.deployed.files)
    files[path] = replace(files[path], **fields) if files[path] else FileState(**fields)
    return replace(facts, deployed=replace(facts.deployed, files=files))


def with_unit(facts, name, **fields):
    return replace(facts, units={**facts.units, name: replace(facts.units[name], **fields)})


def with_runtime(facts, **fields):
    return replace(facts, runtime=replace(facts.runtime, **fields))


def names(files) -> list[str]:
    return [f.path for f in files]


# --- nothing to do ---------------------------------------------------------------------

def test_a_converged_host_has_no_work():
    p = plan_for(converged())
    assert not p.has_work and p.action() == "none (already as declared)" and p.why == ()


def test_a_keyed_converged_host_has_no_work_and_no_key_in_its_arguments():
    keyed = make_spec(service=KEYED)
    facts = converged(keyed)
    assert "--config" in facts.runtime.cmdline and "--api-key" not in facts.runtime.cmdline
    assert not plan_for(facts, keyed).has_work


def test_a_rotated_key_rewrites_the_config_and_header_files_and_restarts_through_the_gate():
    keyed = make_spec(service=KEYED)
    p = plan_for(converged(keyed), keyed, secrets=secrets_of(keyed, key="sk-Rotated0123456789"))
    assert names(p.swap) == [keyed.config_file, keyed.auth_header_file]
    assert p.restart and p.wait and p.backup and not p.daemon_reload
    assert p.action() == "update sglang.yaml, sglang.auth, restart"


def test_a_server_started_with_its_key_in_its_arguments_is_restarted_without_it():
    """An older deploy (or a hand start) put --api-key on the command line; the fact masks it."""
    keyed = make_spec(service=KEYED)
    facts = converged(keyed)
    old = ("/usr/bin/python3", *[a for a in facts.runtime.cmdline[1:] if a not in ("--config", keyed.config_file)],
           "--api-key", "***")
    p = plan_for(with_runtime(facts, cmdline=old), keyed)
    assert p.restart and p.swap == ()
    assert p.why == ("the running server's arguments differ from sglang.service's ExecStart",)


def test_a_systemd_upgrade_to_253_adds_the_journal_filter_and_restarts():
    keyed = make_spec(service=KEYED)
    p = plan_for(converged(keyed, systemd_version=253), keyed)
    assert names(p.swap) == [UNIT] and p.restart and p.daemon_reload
    assert "LogFilterPatterns=~server_args=" in p.swap[0].content


# --- files -------------------------------------------------------------------------------

def test_first_install():
    facts = converged()
    facts = replace(facts, deployed=replace(facts.deployed, files={p: None for p in managed_paths(SPEC)},
                                            dirs={}),
                    units={**facts.units, "sglang.service": unit("sglang.service", load_state="not-found",
                                                                 active_state="inactive", sub_state="dead")},
                    runtime=ServiceRuntime(None, {}, 0))
    p = plan_for(facts)
    assert names(p.swap) == [UNIT, ENV, RECORD]  # no secret declared: no secret file, and none there
    assert p.restart and p.wait and p.enable and p.daemon_reload and not p.backup
    assert p.before.backup is None and p.before.files == {path: None for path in managed_paths(SPEC)}
    assert p.action() == "install, enable, start"
    assert p.why == ()  # an absent unit is not drift


def test_a_changed_spec_updates_unit_and_record_backs_up_and_restarts():
    p = plan_for(converged(), spec=CHANGED)
    assert names(p.swap) == [UNIT, RECORD]
    assert p.backup and p.before.backup == STAMP and p.restart and p.daemon_reload and p.wait and not p.enable
    assert p.replaces_service  # a rollback has the previous service to return to
    assert p.action() == "update sglang.service, spec.json, restart"
    assert p.record == Pending(BEGUN, NOW, BY, target_of(wanted(CHANGED)), True, "", p.before)  # its turn to come


def test_an_env_change_restarts_without_daemon_reload():
    p = plan_for(converged(), spec=make_spec(service={"environment": {"HF_HOME": "/x"}}))
    assert names(p.swap) == [ENV, RECORD] and p.restart and not p.daemon_reload


def test_a_change_of_the_spec_record_alone_restarts_nothing():
    spec = SPEC.model_copy(update={"smoke": SPEC.smoke.model_copy(update={"prompt": "Say hi."})})
    p = plan_for(converged(), spec=spec)
    assert names(p.swap) == [RECORD] and p.backup
    assert not (p.restart or p.wait or p.daemon_reload)
    assert p.action() == "update spec.json"


@pytest.mark.parametrize("field, value", [("mode", "644"), ("owner", "nobody:nogroup")])
def test_a_secret_readable_by_others_is_repaired_without_a_restart(field, value):
    keyed = make_spec(service=KEYED)
    config = keyed.config_file
    p = plan_for(with_file(converged(keyed), config, **{field: value}), spec=keyed)
    assert names(p.repairs) == [config] and p.swap == ()
    assert not (p.restart or p.wait or p.backup)
    assert p.why == (f"{config}: mode/owner {'644' if field == 'mode' else '600'} "
                     f"{'root:root' if field == 'mode' else value}, want 600 root:root",)
    assert p.action() == "fix mode/owner of sglang.yaml"


def test_a_file_with_other_content_is_rewritten_not_repaired():
    p = plan_for(with_file(converged(), UNIT, mode="600", sha1="0" * 40))
    assert names(p.swap) == [UNIT] and p.repairs == ()


def test_a_directory_with_the_wrong_mode_is_repaired():
    facts = converged()
    facts = replace(facts, deployed=replace(facts.deployed, dirs={**facts.deployed.dirs,
                                                                  "/etc/sglang": FileState("755", "root:root")}))
    p = plan_for(facts)
    assert p.dirs == ("/etc/sglang",) and not p.restart
    assert p.why == ("/etc/sglang: mode/owner 755 root:root, want 700 root:root",)


# --- the unit and the process -----------------------------------------------------------

def test_enabled_but_stopped_is_started_through_the_gate():
    p = plan_for(with_runtime(with_unit(converged(), "sglang.service", active_state="inactive", sub_state="dead"),
                              health=0, cmdline=None))
    assert p.restart and p.wait and not p.enable and p.swap == () and not p.backup
    assert not p.replaces_service  # the declared files are the ones there: nothing earlier to return to
    assert p.action() == "start"
    assert p.why == ("sglang.service is inactive (dead)",)


def test_active_but_disabled_is_enabled_without_a_restart():
    p = plan_for(with_unit(converged(), "sglang.service", unit_file_state="disabled"))
    assert p.enable and not (p.restart or p.wait)
    assert p.why == ("sglang.service is disabled, want enabled",)
    assert p.action() == "enable"


def test_a_crash_loop_is_restarted_through_the_gate():
    facts = with_unit(converged(), "sglang.service", active_state="activating", sub_state="auto-restart")
    p = plan_for(with_runtime(facts, health=0))
    assert p.restart and p.wait


def test_a_pending_daemon_reload_is_done_and_restarts_nothing_when_the_process_matches():
    p = plan_for(with_unit(converged(), "sglang.service", need_daemon_reload="yes"))
    assert p.daemon_reload and not p.restart
    assert p.action() == "daemon-reload"
    assert "daemon-reload pending" in p.why[0]


def test_a_process_running_other_arguments_is_restarted():
    facts = converged()
    argv = list(facts.runtime.cmdline)
    argv[argv.index("--speculative-dflash-block-size") + 1] = "4"
    p = plan_for(with_runtime(with_unit(facts, "sglang.service", need_daemon_reload="yes"), cmdline=tuple(argv)))
    assert p.restart and p.wait and p.daemon_reload and p.swap == ()
    assert p.action() == "daemon-reload, restart"
    assert "the running server's arguments differ from sglang.service's ExecStart" in p.why


def test_active_but_not_serving_is_waited_for_never_called_ok():
    p = plan_for(with_runtime(converged(), health=503))
    assert p.has_work and p.wait and not p.restart
    assert p.action() == "wait for /health"
    assert p.why == ("sglang.service is active but not serving: /health 503 at http://127.0.0.1:30000",)
    assert plan_for(with_runtime(converged(), health=0)).why[0].endswith("/health no answer at http://127.0.0.1:30000")


# --- workloads ----------------------------------------------------------------------------

@pytest.mark.parametrize("active, enabled, stopped", [
    ("active", "enabled", True), ("active", "disabled", True), ("inactive", "enabled", True),
    ("activating", "disabled", True), ("inactive", "disabled", False), ("failed", "disabled", False),
])
def test_workloads_that_run_or_would_come_back_at_boot_are_stopped(active, enabled, stopped):
    facts = with_unit(converged(), "dflash-train.service", active_state=active, unit_file_state=enabled)
    p = plan_for(facts)
    assert p.stop_workloads == (("dflash-train.service",) if stopped else ())
    assert p.has_work is stopped
    assert p.before.workloads == {"dflash-train.service": UnitBefore(enabled, active)}
    assert p.before.workloads_to_give_back == ({"dflash-train.service": UnitBefore(enabled, active)} if stopped else {})


SCOPE = {"name": "trainer", "scope": "docker-*.scope", "give_back": ["/usr/bin/docker", "start", "trainer"]}
TORCHRUN = {"name": "torchrun", "command_line": "*torchrun*", "give_back": False}
HELD = make_spec(workloads=["dflash-train", SCOPE, TORCHRUN])


def gpu_process(pid, unit, command_line=None, start=100):
    return GpuProcess(pid, "python", 1024, "GPU-0", unit, command_line, start)


def held_facts(*processes, spec=HELD):
    return replace(converged(spec), gpu_processes=GpuProcessList("ok", (gpu_process(4242, "sglang.service"),
                                                                        *processes)))


@pytest.mark.parametrize("unit, command_line, workload", [
    ("sglang.service", "torchrun x", None),  # the service's own, whatever matches it
    ("dflash-train.service", "torchrun x", "dflash-train.service"),  # a service workload before the patterns
    ("docker-ab.scope", "torchrun x", "trainer"),  # the first that matches, in declared order
    ("session-1.scope", "torchrun x", "torchrun"), ("session-1.scope", "python x", None),
    ("docker-ab.service", None, None), (None, None, None), ("other.service", None, None),
])
def test_the_workload_a_gpu_process_is_of(unit, command_line, workload):
    assert workload_of(HELD, gpu_process(9, unit, command_line)) == workload


def test_a_gpu_process_without_a_pid_is_no_workloads():
    by_name = make_spec(workloads=[{"name": "any", "process_name": "*N/A*", "give_back": False}])
    assert workload_of(by_name, GpuProcess(None, "[N/A]", None, "GPU-0", None)) is None
    assert workload_of(by_name, GpuProcess(9, "[N/A]", None, "GPU-0", None)) == "any"


def test_scopes_and_processes_found_holding_gpus_are_stopped_and_recorded():
    facts = held_facts(gpu_process(10, "docker-ab.scope"), gpu_process(11, "docker-ab.scope"),
                       gpu_process(12, "docker-cd.scope"), gpu_process(20, "session-1.scope", "torchrun a", 7),
                       gpu_process(20, "session-1.scope", "torchrun a", 7),  # on a second GPU: one process
                       gpu_process(21, "session-1.scope", "torchrun b", None),  # no start time: not to be signalled
                       gpu_process(1, "init.scope", "torchrun c", 1))  # nor the host's init
    p = plan_for(facts, HELD)
    found = {"trainer": Held(scopes=("docker-ab.scope", "docker-cd.scope")),
             "torchrun": Held(processes=(FoundProcess(20, 7, "torchrun a"),), given_back=False)}
    assert p.stop_workloads == ("trainer", "torchrun") and p.found == found
    assert p.before.workloads == {"dflash-train.service": UnitBefore("disabled", "inactive"), **found}
    assert p.before.workloads_to_give_back == {"trainer": found["trainer"]}
    assert p.before.workloads_not_given_back == ["torchrun"]
    assert p.action() == "stop trainer, torchrun"
    # what the record keeps of them is read back as it was
    record = json.loads(json.dumps(p.record.to_json()))
    assert record["before"]["workloads"] == {
        "dflash-train.service": {"enabled": "disabled", "active": "inactive"},
        "trainer": {"scopes": ["docker-ab.scope", "docker-cd.scope"]},
        "torchrun": {"processes": [{"pid": 20, "start": 7, "command_line": "torchrun a"}]}}
    assert read_pending(json.dumps(record), HELD) == p.record


def test_a_declared_scope_or_process_workload_not_running_is_neither_stopped_nor_recorded():
    p = plan_for(held_facts(), HELD)
    assert p.stop_workloads == () and p.found == {} and not p.has_work
    assert p.before.workloads == {"dflash-train.service": UnitBefore("disabled", "inactive")}


def test_whether_a_recorded_workload_is_given_back_is_group_datas_word_now():
    """A record of an interrupted run names what was found; the spec read now says how it comes back."""
    text = json.dumps(plan_for(held_facts(gpu_process(10, "docker-ab.scope")), HELD).record.to_json())
    kept = make_spec(workloads=["dflash-train", {**SCOPE, "give_back": False}, TORCHRUN])
    assert read_pending(text, HELD).before.workloads_to_give_back == {"trainer": Held(scopes=("docker-ab.scope",))}
    assert read_pending(text, kept).before.workloads_to_give_back == {}
    assert read_pending(text, kept).before.workloads_not_given_back == ["trainer"]


@pytest.mark.parametrize("name, record, needle", [
    ("dflash-train.service", {"scopes": ["x.scope"]}, "holds dflash-train.service as a scope workload; group_data "
                                                      "declares a service"),
    ("trainer", {"enabled": "enabled", "active": "active"}, "holds trainer as a service; group_data declares a "
                                                            "scope workload"),
    ("torchrun", {"scopes": ["x.scope"]}, "holds torchrun as a scope workload; group_data declares a process workload"),
])
def test_a_record_holding_a_workload_as_another_kind_is_refused(name, record, needle):
    data = plan_for(held_facts(), HELD).record.to_json()
    data["before"]["workloads"][name] = record
    with pytest.raises(ValueError, match=needle):
        read_pending(json.dumps(data), HELD)


@pytest.mark.parametrize("record", [
    {"scopes": []}, {"scopes": ["-H.scope"]}, {"scopes": ["x.service"]}, {"scopes": ["a" * 250 + ".scope"]},
    {"scopes": ["x.scope"] * 1025}, {"processes": []}, {"processes": [{"pid": 0, "start": 1, "command_line": ""}]},
    {"processes": [{"pid": 1, "start": -1, "command_line": ""}]},
    {"processes": [{"pid": 1, "start": 1, "command_line": "x" * 8193}]},
    {"processes": [{"pid": "1", "start": 1, "command_line": ""}]}, {"scopes": ["x.scope"], "processes": []},
])
def test_a_record_of_scopes_or_processes_of_other_types_is_refused(record):
    data = plan_for(held_facts(), HELD).record.to_json()
    data["before"]["workloads"]["trainer"] = record
    with pytest.raises(ValueError, match="unreadable pending-rollout record|holds trainer as"):
        read_pending(json.dumps(data), HELD)


def test_a_version_1_record_holds_services_only():
    data = plan_for(held_facts(gpu_process(10, "docker-ab.scope")), HELD).record.to_json()
    with pytest.raises(ValueError, match="holds trainer as a scope workload"):
        read_pending(json.dumps({**data, "version": 1, "phase": ROLLING_OUT}), HELD)


def test_a_taken_over_rollouts_service_is_not_compared_at_begin():
    # the canary's server it left loading (activating at preflight) serves by begin: not a change to refuse for
    facts = converged()
    assert [u.unit for u in units_as_read(SPEC, facts, taken_over=True)] == [
        u.unit for u in units_as_read(SPEC, facts) if u.unit != SPEC.service_unit]


def test_the_before_state_is_the_host_as_preflight_read_it():
    facts = with_unit(converged(), "dflash-train.service", active_state="active", unit_file_state="enabled")
    p = plan_for(facts, spec=CHANGED)
    assert p.before == Before(
        files={path: facts.deployed.sha1(path) for path in managed_paths(SPEC)},
        backup=STAMP,
        service=UnitBefore("enabled", "active"),
        workloads={"dflash-train.service": UnitBefore("enabled", "active")},
    )
    assert p.before.serving
    assert p.action() == "stop dflash-train.service, update sglang.service, spec.json, restart"


def test_begin_checks_the_units_as_preflight_read_them_not_as_an_interrupted_run_recorded_them():
    """The service is judged serving or not, a workload running or not: what the plan and the rollback ask."""
    facts = with_unit(converged(), "dflash-train.service", active_state="activating", unit_file_state="enabled")
    assert units_as_read(SPEC, facts) == [UnitSeen("sglang.service", "enabled", "active", SERVING_STATES),
                                          UnitSeen("dflash-train.service", "enabled", "activating", RUNNING_STATES)]
    assert units_as_read(SPEC, facts)[1].inside and units_as_read(SPEC, converged())[1].inside is False
    assert SERVING_STATES == ("active",) and Before({}, None, UnitBefore("enabled", "activating"), {}).serving is False
    # a taken-over rollout returns to the state its record holds, but begin compares with the host now
    assert plan_for(facts, interrupted=interrupted()).before == BEFORE
    assert units_as_read(SPEC, facts)[1].active == "activating"


# --- an interrupted rollout ---------------------------------------------------------------

BEFORE = Before({UNIT: "a" * 40, ENV: "b" * 40, SECRET: None, RECORD: "c" * 40}, "20261129T080000Z",
                UnitBefore("enabled", "active"), {"dflash-train.service": UnitBefore("enabled", "active")})


def interrupted(phase=ROLLING_OUT, spec=SPEC, restart=True, before=BEFORE):
    return Pending(phase, NOW - 600, "bob@desk", target_of(wanted(spec)), restart,
                   "the unit stopped" if phase == ROLLING_BACK else "", before)


def test_an_interrupted_rollout_is_taken_over_and_goes_through_the_gate_even_if_healthy():
    p = plan_for(converged(), interrupted=interrupted())
    assert p.has_work and p.wait and not p.restart and not p.backup and not p.finish_rollback
    assert p.before == BEFORE  # the rollback target stays the state before the interrupted run
    assert p.record == Pending(ROLLING_OUT, NOW - 600, "bob@desk", p.record.target, True, "", BEFORE)
    assert p.action().startswith("take over an interrupted rollout (started 2026-11-30 ") and "by bob@desk" in p.action()
    assert p.action().endswith(", wait for /health")


def test_an_interrupted_rollout_whose_turn_had_not_come_is_taken_over_as_only_begun():
    p = plan_for(converged(), spec=CHANGED, interrupted=interrupted(BEGUN))
    assert p.record.phase == BEGUN and not p.record.mid_change and p.before == BEFORE
    assert "its turn had not come" in p.action()
    mid = plan_for(converged(), spec=CHANGED, interrupted=interrupted(ROLLING_OUT))
    assert mid.record.phase == ROLLING_OUT and "mid-change: at once" in mid.action()


def test_a_begun_phase_in_an_older_record_is_refused():
    text = json.dumps({**interrupted(BEGUN).to_json(), "version": 2})
    with pytest.raises(ValueError, match="phase: begun in a version 2 record"):
        read_pending(text, SPEC)


def test_an_interrupted_rollback_of_the_same_spec_is_finished_not_retried():
    it = interrupted(ROLLING_BACK)
    p = plan_for(converged(), interrupted=it)
    assert p.finish_rollback and p.record == it
    assert p.action().startswith("finish the rollback of an interrupted rollout") and "it failed: the unit stopped" in p.action()


def test_an_interrupted_rollback_of_another_spec_heads_for_the_new_one():
    p = plan_for(converged(), spec=CHANGED, interrupted=interrupted(ROLLING_BACK))
    assert not p.finish_rollback and p.restart
    assert p.record.phase == ROLLING_OUT and p.record.target == target_of(wanted(CHANGED))
    assert p.before == BEFORE and not p.backup  # the interrupted run's backup still holds the old files


def test_a_taken_over_rollout_without_a_backup_backs_up_while_the_files_are_still_the_old_ones():
    facts = converged()
    before = replace(BEFORE, files={path: facts.deployed.sha1(path) for path in managed_paths(SPEC)}, backup=None)
    p = plan_for(facts, spec=CHANGED, interrupted=interrupted(before=before, restart=False))
    assert p.backup and p.before.backup == STAMP and p.before.files == before.files


def test_the_pending_record_round_trips_through_json():
    it = interrupted(ROLLING_BACK)
    assert read_pending(json.dumps(it.to_json()), SPEC) == it
    assert it.to_json()["version"] == 3 and it.rolling_back("x").reason == "x"


def test_a_version_1_record_of_an_earlier_deploy_is_read():
    data = interrupted(ROLLING_BACK).to_json()
    assert read_pending(json.dumps({**data, "version": 1}), SPEC) == interrupted(ROLLING_BACK)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"phase": "rolling-out"}', '{"before": 1, "phase": "x", "since": 1, '
                                  '"by": "b", "target": "t", "restart": true}', "[" * 5000 + "]" * 5000, "\udcff"])
def test_an_unreadable_pending_record_says_so(text):
    with pytest.raises(ValueError, match="unreadable pending-rollout record"):
        read_pending(text, SPEC)


def _record(*changes: tuple) -> str:
    """The interrupted record's JSON with (key, ..., value) changes applied."""
    data = interrupted().to_json()
    for *path, key, value in changes:
        node = data
        for p in path:
            node = node[p]
        node[key] = value
    return json.dumps(data)


UNIT_FILE = "/etc/systemd/system/sglang.service"


@pytest.mark.parametrize("change", [
    ("since", float("nan")), ("since", 1e20), ("since", "1700000000"), ("restart", 1), ("version", 4),
    ("phase", "rolling-sideways"), ("target", "t"), ("by", 5), ("reason", "x" * 5000),
    ("before", "backup", "../../etc"), ("before", "backup", 20261129), ("before", "files", UNIT_FILE, "nothex"),
    ("before", "service", "enabled", "enabled; rm -rf /"), ("before", "service", {"enabled": "enabled"}),
    ("before", "workloads", []), ("extra", True),
])
def test_a_pending_record_of_other_types_is_refused_naming_the_field(change):
    with pytest.raises(ValueError, match="unreadable pending-rollout record") as e:
        read_pending(_record(change), SPEC)
    said = str(e.value)
    if change[-1] != change[-1]:  # NaN: refused as JSON, before any field is read
        assert said.endswith("(pending.json: NaN is not a finite number)"), said
    else:  # the field, from the record's top
        assert f"({'.'.join(map(str, change[:-1]))}" in said, said


@pytest.mark.parametrize("path", ["/etc/shadow", "/var/lib/sglang-fleet/sglang/../../../etc/x"])
def test_a_pending_record_naming_files_that_are_not_the_units_is_refused(path):
    # sha1 None is "absent before": a rollback would remove the file
    for sha1_before in (None, "a" * 40):
        with pytest.raises(ValueError, match="names files that are not sglang.service's") as e:
            read_pending(_record(("before", "files", path, sha1_before)), SPEC)
        assert repr(path) in str(e.value)


def test_a_pending_record_naming_a_workload_group_data_does_not_declare_is_refused():
    text = _record(("before", "workloads", "sshd.service", {"enabled": "disabled", "active": "inactive"}))
    with pytest.raises(ValueError, match="workloads group_data does not declare: 'sshd.service'"):
        read_pending(text, SPEC)


def test_masked_argv_hides_only_the_secrets():
    assert masked_argv(["py", "-m", "x", "--api-key", "k", "--port", "1"]) == ["-m", "x", "--api-key", "***", "--port", "1"]
    assert masked_argv(["py", "--admin-api-key=a", "--ssl-keyfile-password", "p", "--ssl-keyfile", "/k"]) == [
        "--admin-api-key=***", "--ssl-keyfile-password", "***", "--ssl-keyfile", "/k"]


def test_sha1_of_absent_content_is_none():
    assert sha1(None) is None and sha1("x\n") == "6fcf9dfbd479ed82697fee719b9f8c610a11ff2a"

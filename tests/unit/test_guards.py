"""Guards: every branch, with HostFacts built by hand (no hosts)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import (
    DRAFT,
    LAUNCHER,
    NO_DRIVER,
    PRO,
    SGLANG_0523,
    SGLANG_DDTREE,
    SPEC,
    TARGET,
    draft,
    good_facts,
    gpu,
    make_spec,
    process,
    target,
    unit,
)

from fleet.rollout.guards import (
    Violation,
    busy_gpus,
    drain_warnings,
    drift_violations,
    engine_violations,
    gpu_violations,
    model_violations,
    preflight,
    rendered_flags,
    trained_block_size,
    unit_violations,
)
from fleet.engine.parse import Engine
from fleet.rollout.gpus import GpuList, GpuProcessList
from fleet.weights.parse import ModelDir
from fleet.rollout.parse import ServiceRuntime, UnitState
from fleet.spec import ClassSpec


def checks(violations: list[Violation]) -> list[str]:
    return [v.check for v in violations]


def test_a_good_host_passes():
    assert preflight("gpu1", SPEC, good_facts()) == []


def test_violation_reads_as_one_line():
    v = Violation("gpu1", "GPU count", "at least 2 GPUs", "1")
    assert str(v) == "gpu1: GPU count: expected at least 2 GPUs, found 1"


# --- GPUs ---------------------------------------------------------------------------------


def test_nvidia_smi_missing():
    found = preflight("gpu1", SPEC, good_facts(gpus=GpuList("nvidia-smi missing", message="command not found"),
                                               gpu_processes=GpuProcessList("nvidia-smi missing")))
    assert [str(v) for v in found] == ["gpu1: nvidia-smi: expected nvidia-smi installed, found none (command not found)"]


@pytest.mark.parametrize("message", [NO_DRIVER, "exit 18: Failed to initialize NVML: Driver/library version mismatch"])
def test_nvidia_smi_failing_shows_its_words(message):
    found = preflight("gpu1", SPEC, good_facts(gpus=GpuList("nvidia-smi failed", message=message),
                                               gpu_processes=GpuProcessList("nvidia-smi failed", message=message)))
    assert [str(v) for v in found] == [f"gpu1: nvidia-smi: expected nvidia-smi to list the GPUs, found {message}"]


def test_zero_gpus():
    (v,) = gpu_violations("gpu1", SPEC, GpuList("ok", ()))
    assert (v.check, v.expected, v.found) == ("GPU count", f"1 x {PRO}", "no GPU (nvidia-smi lists none)")


@pytest.mark.parametrize("name", ["NVIDIA RTX 6000 Ada Generation", "Quadro RTX 6000", "NVIDIA RTX PRO 6000",
                                  "NVIDIA RTX PRO 6000 Blackwell Workstation Edition ", "nvidia rtx pro 6000 blackwell workstation edition"])
def test_gpu_model_is_an_exact_match(name):
    (v,) = gpu_violations("gpu1", SPEC, GpuList("ok", (gpu(0, name),)))
    assert v.check == "GPU model" and v.found == f"GPU 0: {name}"


def test_gpu_model_names_every_gpu_found():
    spec = make_spec(gpu_count=2, accepted_models=["NVIDIA H200"], min_memory_mib=140000)
    gpus = GpuList("ok", (gpu(0, "NVIDIA H200", 143771), gpu(1, "NVIDIA H200 NVL", 143771)))
    (v,) = gpu_violations("h1", spec, gpus)
    assert (v.expected, v.found) == ("NVIDIA H200", "GPU 0: NVIDIA H200, GPU 1: NVIDIA H200 NVL")


def test_any_accepted_model_passes():
    spec = make_spec(accepted_models=[PRO, "NVIDIA RTX PRO 6000 Blackwell Server Edition"], gpu_count=2)
    gpus = GpuList("ok", (gpu(0), gpu(1, "NVIDIA RTX PRO 6000 Blackwell Server Edition")))
    assert gpu_violations("gpu1", spec, gpus) == []


def test_fewer_gpus_than_declared():
    (v,) = gpu_violations("gpu1", make_spec(gpu_count=2), GpuList("ok", (gpu(),)))
    assert str(v) == "gpu1: GPU count: expected at least 2 GPUs, found 1"


def test_more_gpus_than_declared_pass():
    assert gpu_violations("gpu1", SPEC, GpuList("ok", (gpu(0), gpu(1)))) == []


def test_too_little_memory_or_unknown():
    gpus = GpuList("ok", (gpu(0, memory=97887), gpu(1, memory=49140), gpu(2, memory=None)))
    (v,) = gpu_violations("gpu1", make_spec(gpu_count=2), gpus)
    assert str(v) == "gpu1: GPU memory: expected at least 95000 MiB per GPU, found GPU 1: 49140 MiB, GPU 2: memory unknown"


def test_gpu_problems_add_up():
    gpus = GpuList("ok", (gpu(0, "NVIDIA RTX A6000", 49140),))
    assert checks(gpu_violations("gpu1", make_spec(gpu_count=2), gpus)) == ["GPU model", "GPU count", "GPU memory"]


# --- engine -------------------------------------------------------------------------------


def test_no_engine_at_the_launcher():
    (v,) = engine_violations("gpu1", SPEC, Engine("no launcher"))
    assert str(v) == f"gpu1: SGLang engine: expected an SGLang environment at {LAUNCHER}, found no executable there"


def test_engine_not_importable():
    msg = "import sglang exited 1: ModuleNotFoundError: No module named 'sglang'"
    (v,) = engine_violations("gpu1", SPEC, Engine("not importable", message=msg))
    assert (v.check, v.expected, v.found) == ("SGLang engine", f"sglang to load with {LAUNCHER}", msg)


@pytest.mark.parametrize(
    "speculative",
    [
        {"algorithm": "none"},
        {"algorithm": "NGRAM"},
        {"algorithm": "EAGLE3", "draft_model_path": DRAFT, "num_steps": 3, "topk": 4, "num_draft_tokens": 8},
        {"algorithm": "NEXTN"},
        {"algorithm": "DFLASH", "draft_model_path": DRAFT, "block_size": 8},
    ],
)
def test_0523_serves_its_algorithms(speculative):
    assert engine_violations("gpu1", make_spec(speculative), SGLANG_0523) == []


def test_none_needs_no_algorithm_at_all():
    assert engine_violations("gpu1", make_spec({"algorithm": "none"}), replace(SGLANG_0523, algorithms=())) == []


def test_algorithm_the_engine_lacks():
    engine = replace(SGLANG_0523, version="0.4.6", algorithms=("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"))
    (v,) = engine_violations("gpu1", SPEC, engine)
    assert v.check == "speculative algorithm" and v.expected == "an engine with DFLASH"
    assert v.found == f"SGLang 0.4.6 at {LAUNCHER}, which offers EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM"


def test_engine_listing_no_algorithm():
    (v,) = engine_violations("gpu1", SPEC, replace(SGLANG_0523, algorithms=()))
    assert v.found.endswith("which offers no speculative algorithm")


DDTREE = {"algorithm": "DDTREE", "draft_model_path": DRAFT, "block_size": 16, "tree_budget": 64}


def test_ddtree_on_0523_is_refused_never_served_as_dflash():
    found = engine_violations("gpu1", make_spec(DDTREE), SGLANG_0523)
    assert checks(found) == ["speculative algorithm", "SGLang flags"]
    algorithm, flags = found
    assert algorithm.expected == "an engine with DDTREE"
    assert "this engine only does linear DFlash, not DDTree" in algorithm.found
    assert "the spec must say `algorithm: DFLASH`" in algorithm.found
    assert flags.found == "unknown --speculative-ddtree-budget"


def test_ddtree_on_an_engine_without_dflash_says_nothing_of_dflash():
    engine = replace(SGLANG_0523, algorithms=("EAGLE", "NGRAM"))
    algorithm = engine_violations("gpu1", make_spec(DDTREE), engine)[0]
    assert "DFlash" not in algorithm.found and "DFLASH" not in algorithm.found


def test_ddtree_on_an_engine_that_has_it():
    assert engine_violations("gpu1", make_spec(DDTREE), SGLANG_DDTREE) == []


def test_rendered_flags():
    spec = make_spec()
    assert rendered_flags(spec)[:2] == ["--model-path", "--served-model-name"]
    assert "--speculative-dflash-block-size" in rendered_flags(spec) and LAUNCHER not in rendered_flags(spec)


def test_flags_the_engine_does_not_know():
    spec = ClassSpec.model_validate(
        {**SPEC.model_dump(mode="json"),
         "service": {**SPEC.service.model_dump(mode="json"),
                     "extra_args": ["--enable-foo", "--bar=1", "--chunked-prefill-size", "4096", "--enable-foo"]}}
    )
    (v,) = engine_violations("gpu1", spec, SGLANG_0523)
    assert str(v) == "gpu1: SGLang flags: expected flags SGLang 0.5.23 knows, found unknown --enable-foo, --bar"


# --- models -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, found",
    [
        (ModelDir(TARGET, "no directory"), "no directory"),
        (ModelDir(TARGET, "no config.json"), "no config.json"),
        (ModelDir(TARGET, "unreadable", "cat: config.json: Permission denied"),
         "unreadable: cat: config.json: Permission denied"),
        (ModelDir(TARGET, "unreadable", "config.json is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
         "unreadable: config.json is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    ],
)
def test_target_not_usable(model, found):
    (v,) = model_violations("gpu1", SPEC, {TARGET: model, DRAFT: draft()})
    assert (v.check, v.expected, v.found) == (
        "target model", f"a model directory with a readable config.json at {TARGET}", found)


def test_draft_not_usable():
    (v,) = model_violations("gpu1", SPEC, {TARGET: target(), DRAFT: ModelDir(DRAFT, "no directory")})
    assert str(v) == f"gpu1: draft model: expected a model directory with a readable config.json at {DRAFT}, found no directory"


def test_model_not_inspected():
    found = model_violations("gpu1", SPEC, {})
    assert [str(v) for v in found] == [
        f"gpu1: target model: expected {TARGET} inspected, found no answer from the host",
        f"gpu1: draft model: expected {DRAFT} inspected, found no answer from the host",
    ]


@pytest.mark.parametrize("spec", [SPEC, make_spec(DDTREE)])
def test_draft_that_is_no_dflash_draft(spec):
    eagle3 = draft(architectures=("LlamaForCausalLMEagle3",), block_size=None, dflash_config=None)
    (v,) = model_violations("gpu1", spec, {TARGET: target(), DRAFT: eagle3})
    assert v.check == "draft model"
    assert v.found == "architectures ['LlamaForCausalLMEagle3'], neither dflash_config nor block_size"


def test_wrong_architecture_with_a_block_size():
    (v,) = model_violations("gpu1", SPEC, {TARGET: target(), DRAFT: draft(architectures=("Qwen3ForCausalLM",))})
    assert v.found == "architectures ['Qwen3ForCausalLM']"


def test_dflash_architecture_without_dflash_config_nor_block_size():
    (v,) = model_violations("gpu1", SPEC, {TARGET: target(), DRAFT: draft(block_size=None, dflash_config=None)})
    assert v.found == "architectures ['DFlashDraftModel'], neither dflash_config nor block_size"


def test_dflash_draft_with_only_dflash_config_passes():
    # SGLang then uses its default block size: nothing to compare the spec with
    d = draft(block_size=None, dflash_config={"mask_token_id": 1})
    assert trained_block_size(d) is None
    assert model_violations("gpu1", SPEC, {TARGET: target(), DRAFT: d}) == []


def test_no_dflash_checks_for_other_algorithms():
    eagle3 = {"algorithm": "EAGLE3", "draft_model_path": DRAFT}
    d = draft(architectures=("LlamaForCausalLMEagle3",), block_size=None, dflash_config=None)
    assert model_violations("gpu1", make_spec(eagle3), {TARGET: target(), DRAFT: d}) == []


@pytest.mark.parametrize(
    "fields, trained",
    [
        ({"block_size": 8, "dflash_config": None}, 8),
        ({"block_size": None, "dflash_config": {"block_size": 8}}, 8),
        ({"block_size": 16, "dflash_config": {"block_size": 8}}, 8),  # dflash_config first, as SGLang reads it
    ],
)
def test_block_size_larger_than_trained(fields, trained):
    d = draft(**fields)
    assert trained_block_size(d) == trained
    (v,) = model_violations("gpu1", SPEC, {TARGET: target(), DRAFT: d})
    assert str(v) == f"gpu1: draft block size: expected block_size at most 8 (what {DRAFT} was trained for), found 16"


def test_block_size_up_to_trained_passes():
    spec = make_spec({"algorithm": "DFLASH", "draft_model_path": DRAFT, "block_size": 8})
    assert model_violations("gpu1", spec, {TARGET: target(), DRAFT: draft(block_size=16)}) == []
    assert model_violations("gpu1", spec, {TARGET: target(), DRAFT: draft(block_size=8)}) == []


def test_block_size_checked_for_ddtree_too():
    d = draft(block_size=None, dflash_config={"block_size": 8})
    assert checks(model_violations("gpu1", make_spec(DDTREE), {TARGET: target(), DRAFT: d})) == ["draft block size"]


def test_draft_vocabulary_differs():
    (v,) = model_violations("gpu1", SPEC, {TARGET: target(), DRAFT: draft(vocab_size=151936)})
    assert str(v) == f"gpu1: draft vocabulary: expected vocab_size 248320 (the target's), found 151936 in {DRAFT}"


def test_vocabulary_unknown_on_one_side_is_not_compared():
    assert model_violations("gpu1", SPEC, {TARGET: target(), DRAFT: draft(vocab_size=None)}) == []


@pytest.mark.parametrize("algorithm", ["EAGLE", "NEXTN"])
def test_eagle_without_draft_needs_built_in_layers(algorithm):
    spec = make_spec({"algorithm": algorithm})
    (v,) = model_violations("gpu1", spec, {TARGET: target()})
    assert v.check == "draft model"
    assert v.expected == f"a draft_model_path, or a target with built-in draft (MTP) layers for {algorithm}"
    assert v.found == f"no draft_model_path, and {TARGET}/config.json has no num_nextn_predict_layers nor mtp_num_hidden_layers"
    assert model_violations("gpu1", spec, {TARGET: target(mtp_layers=1)}) == []


def test_eagle_without_draft_on_an_unreadable_target_reports_the_target_only():
    spec = make_spec({"algorithm": "NEXTN"})
    assert checks(model_violations("gpu1", spec, {TARGET: ModelDir(TARGET, "no config.json")})) == ["target model"]


def test_no_speculation_needs_only_the_target():
    assert model_violations("gpu1", make_spec({"algorithm": "none"}), {TARGET: target()}) == []


# --- GPUs busy -----------------------------------------------------------------------------


def test_own_service_and_workloads_being_stopped_are_not_busy():
    assert busy_gpus("gpu1", SPEC, good_facts().gpu_processes) == []


def test_workloads_still_there_after_the_stop():
    (v,) = busy_gpus("gpu1", SPEC, good_facts().gpu_processes, workloads=False)
    assert str(v) == (
        "gpu1: GPUs busy: expected GPUs free of processes outside sglang.service, "
        "found pid 4242 python (30512 MiB on GPU-0) in dflash-train.service"
    )


def test_undeclared_processes_refuse_the_host():
    procs = GpuProcessList("ok", (process(77, "sglang.service"), process(5, "jupyter.service", 2048, "python3"),
                                  process(None, None, None, "[Insufficient Permissions]")))
    found = busy_gpus("gpu1", SPEC, procs)
    assert [v.found for v in found] == [
        "pid 5 python3 (2048 MiB on GPU-0) in jupyter.service",
        "pid None [Insufficient Permissions] (memory unknown on GPU-0) in no systemd unit",
    ]
    assert found[0].expected == "GPUs free of processes outside sglang.service and dflash-train.service"


HELD = make_spec(workloads=["dflash-train", {"name": "trainer", "scope": "docker-*.scope", "give_back": False},
                            {"name": "torchrun", "command_line": "*torchrun*", "give_back": False},
                            {"name": "smi", "process_name": "/opt/job/bin/python", "give_back": False}])


def held_process(pid, unit, command_line=None, name="python"):
    return replace(process(pid, unit, name=name), command_line=command_line)


def test_a_declared_scope_or_process_workload_is_not_busy_an_undeclared_one_is():
    procs = GpuProcessList("ok", (
        held_process(1, "docker-0123.scope"), held_process(2, "session-3.scope", "/usr/bin/torchrun train.py"),
        held_process(3, "session-3.scope", None, "/opt/job/bin/python"), held_process(4, "sglang.service"),
        held_process(5, "libpod-0123.scope"), held_process(6, "session-3.scope", "python serve.py"),
        held_process(7, None, None)))
    found = busy_gpus("gpu1", HELD, procs)
    assert [v.found for v in found] == ["pid 5 python (30512 MiB on GPU-0) in libpod-0123.scope",
                                        "pid 6 python (30512 MiB on GPU-0) in session-3.scope",
                                        "pid 7 python (30512 MiB on GPU-0) in no systemd unit"]
    assert found[0].expected == (
        "GPUs free of processes outside sglang.service and dflash-train.service, trainer (scopes docker-*.scope), "
        "torchrun (processes of command line '*torchrun*'), smi (processes of name '/opt/job/bin/python')")
    # after the stop, none of them may be left
    assert [v.found.split()[1] for v in busy_gpus("gpu1", HELD, procs, workloads=False)] == ["1", "2", "3", "5", "6", "7"]


def test_shared_class_allows_anything():
    spec = make_spec(shared=True)
    assert busy_gpus("gpu1", spec, GpuProcessList("ok", (process(5, None),))) == []
    assert busy_gpus("gpu1", spec, GpuProcessList("nvidia-smi failed", message=NO_DRIVER)) == []


def test_unreadable_process_list_is_not_free():
    (v,) = busy_gpus("gpu1", SPEC, GpuProcessList("nvidia-smi failed", message=NO_DRIVER))
    assert (v.check, v.found) == ("GPU processes", NO_DRIVER)
    (v,) = busy_gpus("gpu1", SPEC, GpuProcessList("nvidia-smi missing", message="command not found"))
    assert v.found == "command not found"


def test_preflight_ignores_the_declared_workloads_only():
    foreign = GpuProcessList("ok", (process(4242, "dflash-train.service"), process(9, "other-train.service")))
    assert [v.found for v in preflight("gpu1", SPEC, good_facts(gpu_processes=foreign))] == [
        "pid 9 python (30512 MiB on GPU-0) in other-train.service"
    ]
    held = GpuProcessList("ok", (held_process(4242, "docker-1.scope"), held_process(9, "batch-job.scope")))
    assert [v.found for v in preflight("gpu1", HELD, good_facts(gpu_processes=held))] == [
        "pid 9 python (30512 MiB on GPU-0) in batch-job.scope"
    ]


def test_preflight_reports_an_unreadable_process_list():
    facts = good_facts(gpu_processes=GpuProcessList("nvidia-smi failed", message="exit 15: GPU is lost"))
    assert checks(preflight("gpu1", SPEC, facts)) == ["GPU processes"]


# --- units and the whole ---------------------------------------------------------------------


def test_unit_states_must_be_readable():
    message = "systemctl exited 1: System has not been booted with systemd as init system (PID 1). Can't operate."
    units = {"sglang.service": UnitState("sglang.service", message=message)}
    assert [str(v) for v in unit_violations("gpu1", SPEC, units)] == [
        f"gpu1: systemd unit: expected the state of sglang.service, found {message}",
        "gpu1: systemd unit: expected the state of dflash-train.service, found no answer from the host",
    ]


def test_units_not_found_are_states_not_violations():
    units = {"sglang.service": unit("sglang.service", load_state="not-found"),
             "dflash-train.service": unit("dflash-train.service", load_state="not-found")}
    assert unit_violations("gpu1", SPEC, units) == []


def test_preflight_collects_every_area():
    facts = good_facts(
        gpus=GpuList("ok", (gpu(0, "NVIDIA RTX 6000 Ada Generation", 49140),)),
        engine=Engine("no launcher"),
        models={TARGET: target()},
        gpu_processes=GpuProcessList("ok", (process(5, None),)),
        units={},
    )
    assert checks(preflight("gpu1", SPEC, facts)) == [
        "GPU model", "GPU memory", "SGLang engine", "draft model", "GPUs busy", "systemd unit", "systemd unit"]


# --- local changes a deploy must not paper over ---------------------------------------------

OVERRIDE = "/etc/systemd/system/sglang.service.d/override.conf"


@pytest.mark.parametrize("line", ["ExecStart=/bin/other", "Environment=CUDA_VISIBLE_DEVICES=1",
                                  "EnvironmentFile=/etc/other.env", "UnsetEnvironment=HF_HOME", " PassEnvironment = X"])
def test_a_drop_in_that_replaces_the_command_or_environment_is_refused_naming_the_file(line):
    facts = good_facts(runtime=ServiceRuntime(None, {OVERRIDE: f"[Service]\n{line}\n"}, 200))
    (v,) = drift_violations("gpu1", SPEC, facts)
    assert v.check == "drop-in" and OVERRIDE in v.found and line.split("=")[0].strip() in v.found
    assert "group_data" in v.found


def test_other_drop_ins_and_comments_are_fine():
    facts = good_facts(runtime=ServiceRuntime(None, {
        OVERRIDE: "[Service]\n# ExecStart=/bin/other\n; Environment=X=1\nLimitNOFILE=1048576\nNice=-5\n",
        "/usr/lib/systemd/system/service.d/10-timeout-abort.conf": "[Service]\nTimeoutStopFailureMode=abort\n",
    }, 200))
    assert drift_violations("gpu1", SPEC, facts) == []


@pytest.mark.parametrize("text, warned", [
    ("[Service]\nKillMode=control-group\n", "KillMode=control-group"),
    ("[Service]\nKillMode = process\n", "KillMode=process"),
    ("[Service]\n# KillMode=control-group\nKillMode=mixed\nNice=-5\n", ""),
])
def test_a_drop_in_that_breaks_the_drain_is_warned_of_not_refused(text, warned):
    facts = good_facts(runtime=ServiceRuntime(None, {OVERRIDE: text}, 200))
    warnings = drain_warnings("gpu1", SPEC, facts)
    assert drift_violations("gpu1", SPEC, facts) == []
    if warned:
        (w,) = warnings
        assert OVERRIDE in w and warned in w and "cuts the requests in flight" in w
    else:
        assert warnings == []


def test_a_masked_service_is_refused():
    facts = good_facts(units={**good_facts().units, "sglang.service": unit("sglang.service", unit_file_state="masked")})
    (v,) = drift_violations("gpu1", SPEC, facts)
    assert "systemctl unmask sglang.service" in v.found


def test_an_unreadable_pending_record_is_refused():
    facts = good_facts(deployed=replace(good_facts().deployed, pending="{half a rec"))
    (v,) = drift_violations("gpu1", SPEC, facts)
    assert v.check == "pending rollout" and "/var/lib/sglang-fleet/sglang/pending.json" in v.expected
    assert "unreadable pending-rollout record" in v.found and "remove it" in v.found
    assert v in preflight("gpu1", SPEC, facts)


def test_a_host_with_mig_enabled_is_refused_unless_its_class_declares_mig():
    facts = good_facts(gpus=GpuList("ok", (replace(gpu(), mig="Enabled"),)))
    (v,) = gpu_violations("gpu1", SPEC, facts.gpus)
    assert str(v) == "gpu1: MIG mode: expected MIG disabled (gpu_class.mig is false), found GPU 0: MIG Enabled"
    assert gpu_violations("gpu1", make_spec(mig=True), facts.gpus) == []
    (v,) = gpu_violations("gpu1", make_spec(mig=True), good_facts().gpus)
    assert str(v) == "gpu1: MIG mode: expected MIG enabled (gpu_class.mig is true), found GPU 0: MIG Disabled"


def test_a_hung_nvidia_smi_refuses_the_host_naming_the_command_and_the_bound():
    (v,) = gpu_violations("gpu1", SPEC, GpuList("nvidia-smi hung", message="no answer"))
    assert str(v) == ("gpu1: nvidia-smi: expected an answer within readiness.command_timeout_s = 30s, found none: "
                      "`nvidia-smi --query-gpu` hung and was killed (a GPU fallen off the bus does that; see dmesg "
                      "for Xid errors)")

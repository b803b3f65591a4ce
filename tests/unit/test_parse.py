"""Parsers, on outputs recorded from real hosts (docs: /work/shared/reference/nvidia-smi.md,
tests/fixtures/sglang-0.5.23-help.txt) wrapped in the facts' marker lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.spec.load import load_class_specs
from fleet.rollout.guards import rendered_flags
from fleet.rollout.gpus import (
    COMMAND_LINE_LIMIT,
    Gpu,
    GpuList,
    GpuProcess,
    command_line_of,
    parse_gpu_inventory,
    parse_gpu_processes,
    start_of_stat,
    unit_of_cgroup,
)
from fleet.weights.parse import ModelDir, parse_config, parse_model_dirs
from fleet.engine.parse import parse_algorithms, parse_engine, parse_flags
from fleet.rollout.parse import parse_unit_states
from fleet.spec import SGLANG_0523_ALGORITHMS
from fleet.core.wire import sections

from answers import answer, record

ROOT = Path(__file__).resolve().parents[2]
HELP_0523 = (ROOT / "tests/fixtures/sglang-0.5.23-help.txt").read_text()

# Recorded on real hosts (nvidia-smi.md), verbatim.
H200_ROW = "0, NVIDIA H200, GPU-<uuid>, 143771, 580.159.03, 00000000:19:00.0, Disabled"
HEADER = "index, name, uuid, memory.total [MiB], driver_version, pci.bus_id"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"
NVML_VERSION = "NVML library version: 535.161"
REAL_NAMES = [
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "NVIDIA RTX A6000",
    "NVIDIA RTX 6000 Ada Generation",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA H200 NVL",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA L40S",
    "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 5090",
]


def smi(rc, *lines: str) -> str:
    return answer(record("nvidia-smi", "\n".join(lines), value=str(rc)))


# --- GPU inventory ------------------------------------------------------------------


def test_recorded_h200_row():
    assert parse_gpu_inventory(smi(0, H200_ROW)).gpus == (
        Gpu(0, "NVIDIA H200", "GPU-<uuid>", 143771, "580.159.03", "00000000:19:00.0", "Disabled"),
    )


@pytest.mark.parametrize("name", REAL_NAMES)
def test_real_model_names_kept_whole(name):
    gpus = parse_gpu_inventory(smi(0, f"3, {name}, GPU-1, 97887, 580.159.03, 00000000:1B:00.0, Disabled")).gpus
    assert [g.name for g in gpus] == [name]


def test_several_gpus_in_order():
    rows = [f"{i}, NVIDIA RTX A6000, GPU-{i}, 49140, 550.54.15, 00000000:{0x18 + i:02X}:00.0, [N/A]" for i in range(2)]
    inv = parse_gpu_inventory(smi(0, *rows, ""))
    assert inv.status == "ok" and [(g.index, g.memory_mib) for g in inv.gpus] == [(0, 49140), (1, 49140)]


def test_memory_not_available_is_none():
    assert parse_gpu_inventory(smi(0, "0, NVIDIA H200, GPU-1, [N/A], 580.159.03, 00000000:19:00.0, Disabled")).gpus[0].memory_mib is None


def test_zero_gpus_is_ok_and_empty():
    # Exit 0 and no lines: the host has no GPU. A different answer from the two below.
    assert parse_gpu_inventory(smi(0, "")) == parse_gpu_inventory(smi(0)) == GpuList("ok", ())


def test_missing_is_its_own_answer():
    inv = parse_gpu_inventory(answer(record("nvidia-smi", value="missing")))
    assert inv.status == "nvidia-smi missing" and inv.gpus == ()


def test_driver_not_loaded_keeps_its_message():
    inv = parse_gpu_inventory(smi(9, NO_DRIVER))
    assert inv.status == "nvidia-smi failed"
    assert inv.message == f"exit 9: {NO_DRIVER}"


def test_driver_library_mismatch_keeps_both_lines():
    inv = parse_gpu_inventory(smi(18, MISMATCH, NVML_VERSION))
    assert inv.status == "nvidia-smi failed" and inv.message == f"exit 18: {MISMATCH} {NVML_VERSION}"


def test_failure_without_message():
    assert parse_gpu_inventory(smi(3, "")).message == "exit 3: (no message)"


@pytest.mark.parametrize("line", [HEADER, "WARNING: infoROM is corrupted at gpu 0000:19:00.0", "0, NVIDIA H200"])
def test_unexpected_line_is_a_failure_not_a_guess(line):
    inv = parse_gpu_inventory(smi(0, H200_ROW, line))
    assert inv.status == "nvidia-smi failed" and inv.gpus == () and repr(line.strip()) in inv.message


def test_a_gpu_answer_that_is_not_base64_or_too_long_is_a_failure():
    assert parse_gpu_inventory("@@nvidia-smi=0\n%%%not-base64%%%\n").status == "nvidia-smi failed"
    huge = smi(0, "0, " + "x" * 300 + ", GPU-1, 1, 1, 00000000:19:00.0, Disabled")
    assert parse_gpu_inventory(huge).status == "nvidia-smi failed"


def test_no_output_at_all_is_a_failure():
    assert parse_gpu_inventory("").status == "nvidia-smi failed"


# --- GPU processes ------------------------------------------------------------------


def test_processes_with_their_units():
    text = smi(0, "4242, python, 30512, GPU-aaa", "77, /usr/bin/python3, 1024, GPU-bbb") + answer(
        record("cgroup", "0::/system.slice/dflash-train.service\n", value="4242"),
        record("cgroup", "12:name=systemd:/system.slice/sglang.service\n11:memory:/system.slice/sglang.service\n",
               value="77"),
    )
    assert parse_gpu_processes(text).processes == (
        GpuProcess(4242, "python", 30512, "GPU-aaa", "dflash-train.service"),
        GpuProcess(77, "/usr/bin/python3", 1024, "GPU-bbb", "sglang.service"),
    )


def test_processes_with_their_command_lines_and_start_times():
    stat = "4242 (pt_main_thread) S 1 4242 4242 0 -1 4194560 1 0 0 0 7 2 0 0 20 0 9 0 8855 1 2 3"
    text = smi(0, "4242, python, 30512, GPU-aaa") + answer(
        record("cgroup", "0::/system.slice/docker-ab.scope\n", value="4242"),
        record("cmdline", b"/usr/bin/python3\0-m\0torch.distributed.run\0train.py\0", value="4242"),
        record("stat", stat + "\n", value="4242"))
    assert parse_gpu_processes(text).processes == (
        GpuProcess(4242, "python", 30512, "GPU-aaa", "docker-ab.scope",
                   "/usr/bin/python3 -m torch.distributed.run train.py", 8855),)


@pytest.mark.parametrize("stat, start", [
    ("9 (a b) c) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 1", 77),  # a name with spaces and parentheses
    ("9 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 \u0667\u0667", None),  # Unicode digits
    ("9 (x) S 1 1", None), ("garbage", None),
])
def test_a_start_time_is_read_after_the_name_or_not_at_all(stat, start):
    text = smi(0, "9, x, 1, GPU-a") + answer(record("stat", stat, value="9"))
    assert parse_gpu_processes(text).processes[0].start == start


def test_a_command_line_is_bounded_and_unknown_when_unread():
    long = "a" * 20000
    text = smi(0, "9, x, 1, GPU-a", "10, y, 1, GPU-a") + answer(
        record("cmdline", long.encode() + b"\0", value="9"), record("cmdline", "", value="10"))
    first, second = parse_gpu_processes(text).processes
    assert first.command_line == long[:COMMAND_LINE_LIMIT] and second.command_line is None


@settings(derandomize=True, database=None, deadline=None, max_examples=300)
@given(text=st.one_of(st.text(), st.lists(st.sampled_from(["0::", "1:name=systemd:", "/", "x.scope", "a.service",
                                                           ".slice", ")", " ", "\ufffd", "7"])).map("".join)))
def test_a_hosts_cgroup_cmdline_or_stat_reads_as_its_type_or_as_unknown(text):
    unit = unit_of_cgroup(text.split("\n"))
    assert unit is None or (unit.endswith((".service", ".scope")) and len(unit) <= 255 and "/" not in unit)
    line = command_line_of(text)
    assert line is None or len(line) <= COMMAND_LINE_LIMIT
    start = start_of_stat(text)
    assert start is None or 0 <= start < 1 << 62


def test_no_process_is_ok_and_empty():
    procs = parse_gpu_processes(smi(0, ""))
    assert procs.status == "ok" and procs.processes == ()


@pytest.mark.parametrize("field", ["[N/A]", "[Insufficient Permissions]"])
def test_unavailable_fields_parse(field):
    (p,) = parse_gpu_processes(smi(0, f"{field}, {field}, {field}, GPU-aaa")).processes
    assert (p.pid, p.name, p.used_memory_mib, p.gpu_uuid, p.unit) == (None, field, None, "GPU-aaa", None)


def test_process_whose_cgroup_could_not_be_read_has_no_unit():
    # the process ended between nvidia-smi and cat: an empty block
    assert parse_gpu_processes(smi(0, "9, x, 1, GPU-a") + answer(record("cgroup", "", value="9"))).processes[0].unit is None


def test_a_process_that_ended_before_its_proc_was_read_holds_no_gpu():
    """nvidia-smi listed it, and its /proc was gone by the read (a crash loop's scheduler): not a process on the GPU,
    so never "outside any unit" (a host refused for a process that is no more)."""
    text = smi(0, "9, sglang::scheduler_TP0, 45762, GPU-a", "10, python, 1, GPU-a") + answer(
        record("cgroup", "", value="9"), record("cmdline", "", value="9"), record("stat", "", value="9"),
        record("cgroup", "0::/system.slice/dflash-train.service\n", value="10"),
        record("stat", "10 (python) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 1\n", value="10"))
    assert [(p.pid, p.unit, p.start) for p in parse_gpu_processes(text).processes] == [
        (10, "dflash-train.service", 77)]


def test_process_failures_are_answers():
    assert parse_gpu_processes(answer(record("nvidia-smi", value="missing"))).status == "nvidia-smi missing"
    failed = parse_gpu_processes(smi(9, NO_DRIVER))
    assert failed.status == "nvidia-smi failed" and NO_DRIVER in failed.message
    assert parse_gpu_processes(smi(0, "garbage")).status == "nvidia-smi failed"


@pytest.mark.parametrize(
    "lines, unit",
    [
        (["0::/system.slice/dflash-train.service"], "dflash-train.service"),
        (["1:name=systemd:/system.slice/sglang.service"], "sglang.service"),
        (["0::/system.slice/sglang.service/payload"], "sglang.service"),  # Delegate=yes subgroup
        # below user@.service is the user's own systemd: its units are not the host's systemctl's to stop
        (["0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service"], "user@1000.service"),
        (["0::/user.slice/user-1000.slice/user@1000.service/tmux-spawn-1a2b.scope"], "user@1000.service"),
        (["0::/user.slice/user-0.slice/session-3.scope"], "session-3.scope"),  # a login shell
        (["0::/system.slice/docker-0123abcd.scope"], "docker-0123abcd.scope"),  # a container
        (["1:name=systemd:/system.slice/libpod-0123abcd.scope/container"], "libpod-0123abcd.scope"),
        # a container running its own systemd: the host's unit is the container's scope
        (["0::/system.slice/docker-0123abcd.scope/system.slice/train.service"], "docker-0123abcd.scope"),
        (["0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"], "slurmstepd.scope"),  # a Slurm step
        (["0::/init.scope"], "init.scope"),
        # a container's processes without a cgroup namespace: its own directories come first
        (["1:name=systemd:/sgllab/held-1/payload/system.slice/trainer.scope"], "trainer.scope"),
        (["0::/system.slice/-bad.scope"], None), (["0::/system.slice/x y.service"], None),  # no unit name
        ([f"0::/system.slice/{'a' * 250}.scope"], None),  # longer than systemd's 255
        (["0::/system.slice/x.mount"], None),
        (["4:memory:/system.slice/sglang.service"], None),  # not systemd's hierarchy
        # this machine's own (cgroup v1 + v2, nothing below the root)
        (["9:name=systemd:/", "4:memory:/process_api/09777b54c04c599cfbcf205f738345ae", "0::/"], None),
        ([], None),
    ],
)
def test_unit_of_cgroup(lines, unit):
    assert unit_of_cgroup(lines) == unit


# --- SGLang engine ------------------------------------------------------------------


def test_algorithms_of_0523_from_its_help():
    assert parse_algorithms(HELP_0523) == SGLANG_0523_ALGORITHMS
    assert "DDTREE" not in parse_algorithms(HELP_0523)


def test_algorithms_as_fixed_choices():
    help_text = (
        "options:\n"
        "  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM,DFLASH,DDTREE}\n"
        "                        Speculative algorithm.\n"
        "  --speculative-ddtree-budget SPECULATIVE_DDTREE_BUDGET\n"
    )
    assert parse_algorithms(help_text)[-2:] == ("DFLASH", "DDTREE")
    assert "--speculative-ddtree-budget" in parse_flags(help_text)


def test_no_algorithm_flag_means_no_algorithms():
    assert parse_algorithms("options:\n  --model-path MODEL_PATH\n") == ()


def test_flags_of_0523_from_its_help():
    flags = parse_flags(HELP_0523)
    # aliases, short options, BooleanOptionalAction pairs, options whose help shares their line
    assert {"--model-path", "--model", "--speculative-draft-model", "-h", "--help"} <= flags
    assert {"--enable-tf32-matmul", "--no-enable-tf32-matmul", "--revision"} <= flags
    assert all(f.startswith("-") and " " not in f and "," not in f for f in flags)
    # flags only named in other options' help text are not options
    assert "--speculative-ddtree-budget" not in flags and "--cuda-graph-*" not in flags


def test_every_flag_our_group_data_renders_is_in_0523():
    for group, spec in load_class_specs(ROOT / "group_data").items():
        assert set(rendered_flags(spec)) <= parse_flags(HELP_0523), group


def engine_output(version_rc=0, version=("0.5.23",), help_rc=0, help_text=HELP_0523) -> str:
    return answer(record("version", "\n".join(version), str(version_rc)), record("help", help_text, str(help_rc)))


def test_engine_ok():
    e = parse_engine(engine_output(version=("some warning on stderr", "0.5.23")))
    assert (e.status, e.version, e.algorithms) == ("ok", "0.5.23", SGLANG_0523_ALGORITHMS)
    assert e.flags == parse_flags(HELP_0523)


# What the real 0.5.23 venv printed on stderr before --help (the fact keeps stderr), verbatim.
LAUNCH_SERVER_WARNING = (
    "/root/.cache/sglang-fleet/sglang-0.5.23/lib/python3.11/site-packages/sglang/launch_server.py:71: UserWarning: "
    "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.\n"
    "  Example: sglang serve --model-path <model> [options]\n"
    "  warnings.warn(\n"
)


def test_engine_help_after_the_real_warning():
    e = parse_engine(engine_output(help_text=LAUNCH_SERVER_WARNING + HELP_0523))
    assert e.flags == parse_flags(HELP_0523) and e.algorithms == SGLANG_0523_ALGORITHMS


def test_engine_launcher_missing():
    assert parse_engine(answer(record("launcher", value="missing"))).status == "no launcher"


def test_engine_sglang_not_importable():
    traceback = ("Traceback (most recent call last):", '  File "<string>", line 1, in <module>',
                 "ModuleNotFoundError: No module named 'sglang'")
    e = parse_engine(engine_output(version_rc=1, version=traceback, help_rc=1, help_text="x"))
    assert e.status == "not importable"
    assert e.message == "import sglang exited 1: ModuleNotFoundError: No module named 'sglang'"


def test_engine_help_failing():
    e = parse_engine(engine_output(help_rc=1, help_text="RuntimeError: operator torchvision::nms does not exist\n"))
    assert e.status == "not importable"
    assert e.message == "sglang.launch_server --help exited 1: RuntimeError: operator torchvision::nms does not exist"


def test_engine_no_answer():
    assert parse_engine("").status == "not importable"
    assert parse_engine(answer(record("version", "0.5.23", "0"))).message == "no answer from the host"


def test_a_cached_engine_answer_is_read_inside_its_record_and_cannot_frame_what_follows():
    cached = engine_output()
    e = parse_engine(answer(record("engine-cache", cached, "hit")))
    assert (e.status, e.cached, e.version) == ("ok", True, "0.5.23")
    # a cache file holding marker lines of its own stays inside its record
    forged = answer(record("engine-cache", "@@section=gpus\n@@launcher=missing\n", "hit"))
    assert parse_engine(forged).status == "not importable" and sections(forged) == {}


# --- model directories ---------------------------------------------------------------

# z-lab DFlash draft config.json (fields as sglang-0.5.23.md lists them)
DFLASH_DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "block_size": 16,
    "num_target_layers": 64,
    "num_hidden_layers": 5,
    "hidden_size": 5120,
    "vocab_size": 248320,
    "dflash_config": {"mask_token_id": 248077, "target_layer_ids": [1, 16, 31, 46, 61]},
}
# Qwen3.5/3.6: multimodal, the LM's values (and its MTP layer) under text_config
QWEN36_TARGET = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "vocab_size": 248320,
        "mtp_num_hidden_layers": 1,
    },
    "vision_config": {"hidden_size": 1152},
}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
               "hidden_size": 7168, "num_hidden_layers": 61, "num_nextn_predict_layers": 1}


def test_dflash_draft_config():
    m = parse_config("/m/d", json.dumps(DFLASH_DRAFT, indent=2))
    assert m == ModelDir(
        "/m/d", "ok", architectures=("DFlashDraftModel",), model_type="qwen3", vocab_size=248320, hidden_size=5120,
        num_hidden_layers=5, block_size=16, dflash_config=DFLASH_DRAFT["dflash_config"], mtp_layers=0,
    )


def test_multimodal_target_reads_text_config():
    m = parse_config("/m/t", json.dumps(QWEN36_TARGET))
    assert (m.model_type, m.vocab_size, m.hidden_size, m.num_hidden_layers, m.mtp_layers) == (
        "qwen3_5", 248320, 5120, 64, 1)


def test_nextn_layers_at_top_level():
    assert parse_config("/m/ds", json.dumps(DEEPSEEK_V3)).mtp_layers == 1


def test_config_with_odd_types_is_read_leniently():
    m = parse_config("/m/x", json.dumps({"architectures": "Llama", "vocab_size": "32000", "block_size": True,
                                         "dflash_config": [], "text_config": 3}))
    assert (m.status, m.architectures, m.vocab_size, m.block_size, m.dflash_config) == ("ok", (), None, None, None)


@pytest.mark.parametrize("text, why", [("{", "not valid JSON"), ("", "not valid JSON"), ("[1]", "not a JSON object")])
def test_unreadable_config(text, why):
    m = parse_config("/m/x", text)
    assert m.status == "unreadable" and why in m.message


def test_model_dirs_per_path():
    text = answer(
        record("path", value="/m/t"), record("config", json.dumps(QWEN36_TARGET, indent=2), "0"),
        record("path", value="/m/gone"), record("missing", value="directory"),
        record("path", value="/m/empty"), record("missing", value="config.json"),
        record("path", value="/m/locked"), record("config", "cat: /m/locked/config.json: Permission denied", "1"),
        record("path", value="/m/bad"), record("config", '{"vocab_size": 1', "0"),
    )
    models = parse_model_dirs(text)
    assert {p: m.status for p, m in models.items()} == {
        "/m/t": "ok", "/m/gone": "no directory", "/m/empty": "no config.json", "/m/locked": "unreadable",
        "/m/bad": "unreadable",
    }
    assert models["/m/t"].vocab_size == 248320
    assert models["/m/locked"].message == "cat: /m/locked/config.json: Permission denied"


# --- units ------------------------------------------------------------------------------


def test_unit_states():
    text = answer(
        record("unit", value="sglang.service"),
        record("systemctl", "\n".join(["Id=sglang.service", "LoadState=loaded", "ActiveState=active",
                                       "SubState=running", "MainPID=4242", "NRestarts=2", "UnitFileState=enabled",
                                       "ExecMainStatus=0"]), "0"),
        record("unit", value="dflash-train"),
        record("systemctl", "\n".join(["MainPID=0", "Id=dflash-train.service", "LoadState=not-found",
                                       "ActiveState=inactive", "SubState=dead", "NRestarts=0", "ExecMainStatus=0",
                                       "UnitFileState="]), "0"),
    )
    units = parse_unit_states(text)
    s, t = units["sglang.service"], units["dflash-train"]
    assert (s.id, s.load_state, s.active_state, s.sub_state, s.main_pid, s.n_restarts, s.unit_file_state,
            s.exec_main_status, s.message) == ("sglang.service", "loaded", "active", "running", 4242, 2, "enabled", 0, "")
    assert (t.name, t.id, t.load_state, t.main_pid, t.unit_file_state) == (
        "dflash-train", "dflash-train.service", "not-found", 0, "")


def test_unit_states_systemctl_failing():
    text = answer(record("unit", value="sglang.service"), record(
        "systemctl", "System has not been booted with systemd as init system (PID 1). Can't operate.", "1"))
    u = parse_unit_states(text)["sglang.service"]
    assert u.message.startswith("systemctl exited 1: System has not been booted") and u.active_state == ""


def test_unit_property_missing_on_old_systemd():
    assert parse_unit_states(answer(record("unit", value="a.service"), record("systemctl", "Id=a.service", "0"))).get(
        "a.service").n_restarts is None


@pytest.mark.parametrize("pid", ["[not set]", "\u0664\u0662", "1e9", "99999999999999999999999"])
def test_a_unit_number_that_is_not_ascii_digits_reads_as_unknown(pid):
    text = answer(record("unit", value="a.service"), record("systemctl", f"Id=a.service\nMainPID={pid}", "0"))
    assert parse_unit_states(text)["a.service"].main_pid is None


# --- sections -----------------------------------------------------------------------------


def test_sections():
    text = "noise\n@@section=gpus\n@@nvidia-smi=missing\n@@section=models\n@@section=units\n@@unit=a\n"
    assert sections(text) == {"gpus": ["@@nvidia-smi=missing"], "models": [], "units": ["@@unit=a"]}


def test_content_holding_marker_lines_stays_in_its_record():
    forged = "@@section=gpus\n@@nvidia-smi=0\n" + "MCwgTlZJRElBIEgyMDAsIEdQVS0xLCAxLCAxLCAwLCBEaXNhYmxlZA=="
    text = answer(record("section", value="models"), record("path", value="/m/t"), record("config", forged, "0"))
    assert list(sections(text)) == ["models"]
    assert parse_model_dirs(sections(text)["models"])["/m/t"].status == "unreadable"


def test_mig_mode_is_read():
    rows = ["0, NVIDIA H200, GPU-0, 143771, 580.159.03, 00000000:19:00.0, Enabled",
            "1, NVIDIA RTX A6000, GPU-1, 49140, 580.159.03, 00000000:1A:00.0, [N/A]"]
    assert [g.mig for g in parse_gpu_inventory(smi(0, *rows)).gpus] == ["Enabled", "[N/A]"]

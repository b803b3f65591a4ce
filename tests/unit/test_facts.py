"""Facts without hosts: their commands as strings, run here by sh (dash on Debian, as on the
hosts) against stand-in binaries that print recorded outputs, and their process()."""

from __future__ import annotations

import grp
import hashlib
import json
from dataclasses import replace
import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest
from pyinfra.api import FactBase

from facts.deploy import DeployedFiles
from facts.gpu import GPU_QUERY, PROCESS_QUERY, GpuInventory, GpuProcesses
from facts.models import ModelDirs
from facts.programs import HostPrograms
from facts.preflight import SECTIONS, HostSnapshot
from facts.service import RunningService
from facts.sglang import SglangEngine
from fleet.core.layout import ENGINE_CACHE_DIR
from facts.systemd import SystemdVersion, UnitStates
from fleet.rollout.lock import LockFacts
from fleet.engine.parse import Engine, parse_flags
from fleet.rollout.parse import (
    UNIT_PROPERTIES,
    parse_systemd_version,
    DeployState,
    FileState,
    HostFacts,
    ServiceRuntime,
)
from fleet.rollout.gpus import Gpu, GpuList, unit_of_cgroup
from fleet.spec import SGLANG_0523_ALGORITHMS
from fleet.core.wire import BLOCK_LIMIT

from answers import answer, record

HELP_0523 = Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.23-help.txt"
H200_ROW = "0, NVIDIA H200, GPU-<uuid>, 143771, 580.159.03, 00000000:19:00.0, Disabled"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def test_queries_are_the_documented_ones():
    assert GPU_QUERY == "--query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id,mig.mode.current --format=csv,noheader,nounits"
    assert PROCESS_QUERY == "--query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,nounits"
    assert f"nvidia-smi {GPU_QUERY}" in GpuInventory().command()
    assert f"nvidia-smi {PROCESS_QUERY}" in GpuProcesses().command()
    assert "command -v nvidia-smi" in GpuInventory().command()


def test_facts_are_plain_pyinfra_facts():
    for fact in (GpuInventory, GpuProcesses, SglangEngine, ModelDirs, UnitStates, DeployedFiles, RunningService,
                 HostSnapshot):
        assert issubclass(fact, FactBase) and fact().requires_command() is None and fact.shell_executable is None
    assert ModelDirs.default() == {} and UnitStates.default() == {}


DEPLOYED = (["/etc/systemd/system/sglang.service"], ["/etc/sglang"], ["/etc/systemd/system/sglang.service"],
            "/run/sglang-fleet/sglang.lock", "/var/lib/sglang-fleet/sglang/pending.json")
RUNTIME = ("sglang.service", "http://127.0.0.1:30000/health")


def test_combined_command_reuses_each_fact_command():
    engine = ["/opt/sglang/bin/python", {"CUDA_HOME": "/usr/local/cuda"}, ENGINE_CACHE_DIR]
    command = HostSnapshot().command(engine, [["/m/t", "/m/d"]], [["sglang.service"]],
                                     list(DEPLOYED), list(RUNTIME), ["curl", "flock"], timeout_s=30)
    for part in (
        GpuInventory().command(30),
        GpuProcesses().command(30),
        SglangEngine().command("/opt/sglang/bin/python", 30, {"CUDA_HOME": "/usr/local/cuda"}, ENGINE_CACHE_DIR),
        ModelDirs().command(["/m/t", "/m/d"]),
        UnitStates().command(["sglang.service"]),
        DeployedFiles().command(*DEPLOYED),
        RunningService().command(*RUNTIME),
        HostPrograms().command(["curl", "flock"]),
    ):
        assert part in command
    assert list(SECTIONS) == list(HostFacts.__dataclass_fields__)


def test_process_on_recorded_output():
    assert GpuInventory().process(answer(record("nvidia-smi", H200_ROW, "0")).splitlines()) == GpuList(
        "ok", (Gpu(0, "NVIDIA H200", "GPU-<uuid>", 143771, "580.159.03", "00000000:19:00.0", "Disabled"),)
    )
    assert GpuInventory().process(answer(record("nvidia-smi", NO_DRIVER, "9")).splitlines()).message == \
        f"exit 9: {NO_DRIVER}"
    assert GpuProcesses().process(["@@nvidia-smi=missing"]).status == "nvidia-smi missing"


# --- the commands, run by sh against stand-ins ------------------------------------------------


@pytest.fixture
def bin_dir(tmp_path):
    """A PATH holding only what the commands use besides sh builtins (and the stand-ins we add)."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("cat", "sha1sum", "cut", "stat", "sed", "tr", "mktemp", "rm", "timeout", "sleep", "env", "grep", "mkdir",
                 "mv", "ls", "tail", "xargs", "base64", "head", "awk"):
        (d / tool).symlink_to(f"/usr/bin/{tool}")
    return d


def stand_in(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def nvidia_smi(bin_dir: Path, output: str, rc: int = 0) -> None:
    """nvidia-smi printing `output` for any query, then exiting `rc`."""
    (bin_dir / "nvidia-smi.out").write_text(output)
    stand_in(bin_dir / "nvidia-smi", f'/bin/cat "{bin_dir}/nvidia-smi.out"\nexit {rc}\n')


def run(command: str, bin_dir: Path) -> list[str]:
    """What pyinfra hands process(): the stdout lines of `sh -c COMMAND`, which must exit 0."""
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env={"PATH": str(bin_dir)})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_gpus_listed(bin_dir):
    nvidia_smi(bin_dir, H200_ROW + "\n")
    assert GpuInventory().process(run(GpuInventory().command(), bin_dir)).gpus[0].name == "NVIDIA H200"


def test_nvidia_smi_missing_failing_and_no_gpu_are_three_answers(bin_dir):
    missing = GpuInventory().process(run(GpuInventory().command(), bin_dir))
    nvidia_smi(bin_dir, NO_DRIVER + "\n", rc=9)
    failing = GpuInventory().process(run(GpuInventory().command(), bin_dir))
    nvidia_smi(bin_dir, "")
    none = GpuInventory().process(run(GpuInventory().command(), bin_dir))
    assert (missing.status, failing.status, none.status) == ("nvidia-smi missing", "nvidia-smi failed", "ok")
    assert failing.message == f"exit 9: {NO_DRIVER}" and none.gpus == ()


def test_nvidia_smi_message_on_stderr_is_kept(bin_dir):
    stand_in(bin_dir / "nvidia-smi", 'echo "Failed to initialize NVML: Driver/library version mismatch" >&2\nexit 18\n')
    inv = GpuInventory().process(run(GpuInventory().command(), bin_dir))
    assert inv.message == "exit 18: Failed to initialize NVML: Driver/library version mismatch"


def test_nvidia_smi_warnings_on_stderr_are_kept_apart_from_the_csv(bin_dir):
    """A real host's "WARNING: infoROM is corrupted" (stderr) must not make its CSV unreadable."""
    warning = "WARNING: infoROM is corrupted at gpu 0000:19:00.0"
    stand_in(bin_dir / "nvidia-smi", f'echo "{warning}" >&2\necho "{H200_ROW}"\n')
    inv = GpuInventory().process(run(GpuInventory().command(), bin_dir))
    assert inv.status == "ok" and inv.gpus[0].name == "NVIDIA H200" and inv.warnings == (warning,)


def test_a_hanging_nvidia_smi_is_killed_and_said_so(bin_dir):
    stand_in(bin_dir / "nvidia-smi", "sleep 60\n")
    t = time.monotonic()
    inv = GpuInventory().process(run(GpuInventory().command(timeout_s=1), bin_dir))
    assert time.monotonic() - t < 30
    assert (inv.status, inv.message) == ("nvidia-smi hung", "no answer: killed by the command timeout")


def test_gpu_processes_with_their_units(bin_dir):
    me = os.getpid()
    # the last one ended before its /proc was read: still an answer, and exit 0; it holds no GPU now
    nvidia_smi(bin_dir, f"{me}, python, 1024, GPU-aaa\n[N/A], [N/A], [N/A], GPU-bbb\n2147483646, gone, 10, GPU-aaa\n")
    procs = GpuProcesses().process(run(GpuProcesses().command(), bin_dir)).processes
    mine = unit_of_cgroup(Path(f"/proc/{me}/cgroup").read_text().splitlines())
    assert [(p.pid, p.unit) for p in procs] == [(me, mine), (None, None)]
    # what a workload is matched by and a process told from a later one of its pid: as /proc has them
    args = Path(f"/proc/{me}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert procs[0].command_line == " ".join(a.decode() for a in args)
    assert procs[0].start == int(Path(f"/proc/{me}/stat").read_text().rpartition(")")[2].split()[19])


def test_gpu_processes_when_nvidia_smi_fails(bin_dir):
    nvidia_smi(bin_dir, NO_DRIVER + "\n", rc=9)
    procs = GpuProcesses().process(run(GpuProcesses().command(), bin_dir))
    assert procs.status == "nvidia-smi failed" and procs.processes == ()


def launcher(bin_dir: Path, version_script: str, help_script: str, key: str = "") -> str:
    """A launcher whose `-c` import of sglang runs version_script, whose --help runs help_script,
    and whose engine key (importlib.metadata, no sglang import) is `key` ('' : no RECORD)."""
    return str(stand_in(bin_dir / "python",
                        f'case "$2" in *importlib.metadata*) [ -n "{key}" ] && echo {key}; exit 0;; esac\n'
                        f'if [ "$1" = -c ]; then\n{version_script}\nelse\n{help_script}\nfi\n'))


def engine_of(py: str, bin_dir: Path, env: dict | None = None) -> Engine:
    cache = bin_dir.parent / "engine-cache"
    return SglangEngine().process(run(SglangEngine().command(py, 0, env or {}, str(cache)), bin_dir))


def test_engine(bin_dir):
    py = launcher(bin_dir, "echo 0.5.23", f'/bin/cat "{HELP_0523}"')
    engine = engine_of(py, bin_dir)
    assert (engine.status, engine.version, engine.algorithms) == ("ok", "0.5.23", SGLANG_0523_ALGORITHMS)
    assert engine.flags == parse_flags(HELP_0523.read_text())


def test_engine_launcher_missing(bin_dir):
    assert engine_of("/nonexistent/bin/python", bin_dir).status == "no launcher"


def test_engine_not_importable(bin_dir):
    fail = "echo \"ModuleNotFoundError: No module named 'sglang'\" >&2; exit 1"
    engine = engine_of(launcher(bin_dir, fail, fail, key="a1"), bin_dir)
    assert engine.status == "not importable" and engine.message.endswith("No module named 'sglang'")


def test_engine_launcher_path_is_quoted(bin_dir, tmp_path):
    odd = tmp_path / "it's here"
    odd.mkdir()
    py = stand_in(odd / "python", f'if [ "$1" = -c ]; then echo 0.5.23; else /bin/cat "{HELP_0523}"; fi\n')
    assert engine_of(str(py), bin_dir).status == "ok"


def test_the_engine_is_read_once_then_from_the_hosts_cache(bin_dir):
    """A no-op run imports nothing: the answer is cached under the engine's key; another key (an
    upgrade, a plugin) or another environment reads the engine again. A failed read is not cached."""
    calls = bin_dir.parent / "calls"
    py = launcher(bin_dir, f"echo import >> {calls}; echo 0.5.23", f'echo help >> {calls}; /bin/cat "{HELP_0523}"',
                  key="a1")
    first, second = engine_of(py, bin_dir), engine_of(py, bin_dir)
    assert first == replace(second, cached=False) and (first.cached, second.cached) == (False, True)
    assert calls.read_text().split() == ["import", "help"]  # the second run imported nothing
    assert engine_of(py, bin_dir, {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}).cached is False
    launcher(bin_dir, "echo 0.5.24", f'/bin/cat "{HELP_0523}"', key="a2")
    assert (engine_of(py, bin_dir).version, engine_of(py, bin_dir).cached) == ("0.5.24", True)
    fail = "echo boom >&2; exit 1"
    launcher(bin_dir, fail, fail, key="a3")
    assert engine_of(py, bin_dir).status == engine_of(py, bin_dir).status == "not importable"
    assert sorted(p.name.split("-")[0] for p in (bin_dir.parent / "engine-cache").iterdir()) == ["a1", "a1", "a2"]
    # a key that is not hexadecimal names no file: nothing is cached under it
    launcher(bin_dir, "echo 0.5.23", f'/bin/cat "{HELP_0523}"', key="../../x")
    assert engine_of(py, bin_dir).cached is False and not (bin_dir.parent / "x").exists()


def test_without_a_record_the_engine_is_read_every_time(bin_dir):
    py = launcher(bin_dir, "echo 0.5.23", f'/bin/cat "{HELP_0523}"', key="")
    assert engine_of(py, bin_dir).cached is False and engine_of(py, bin_dir).cached is False
    assert not (bin_dir.parent / "engine-cache").exists()


def test_model_dirs(bin_dir, tmp_path):
    def model(name: str, config: str | None) -> str:
        d = tmp_path / name
        d.mkdir()
        if config is not None:
            (d / "config.json").write_text(config)
        return str(d)

    ok = model("Qwen3.6-27B-DFlash", json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 16}))
    no_newline = model("it's odd", '{"vocab_size": 151936}')
    empty = model("empty", None)
    bad = model("bad", "{")
    paths = [ok, no_newline, empty, bad, str(tmp_path / "gone")]
    models = ModelDirs().process(run(ModelDirs().command(paths), bin_dir))
    assert [models[p].status for p in paths] == ["ok", "ok", "no config.json", "unreadable", "no directory"]
    assert models[ok].architectures == ("DFlashDraftModel",) and models[no_newline].vocab_size == 151936


def test_no_models_no_units(bin_dir):
    assert run(ModelDirs().command([]), bin_dir) == [] and run(UnitStates().command([]), bin_dir) == []


def systemctl(bin_dir: Path) -> None:
    """systemctl show: sglang.service active, anything else not found, a bad name refused; --version: 252."""
    stand_in(
        bin_dir / "systemctl",
        '[ "$1" = --version ] && { echo "systemd 252 (252.39-1~deb12u2)"; echo "+PAM +AUDIT -APPARMOR"; exit 0; }\n'
        'unit="$5"\n'
        'case "$unit" in\n'
        "  sglang.service) printf 'Id=sglang.service\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\n"
        "MainPID=4242\\nNRestarts=0\\nUnitFileState=enabled\\nExecMainStatus=0\\n';;\n"
        "  *@) echo \"Failed to get properties: Unit name $unit is not valid.\" >&2; exit 1;;\n"
        "  *) printf 'Id=%s\\nLoadState=not-found\\nActiveState=inactive\\nSubState=dead\\nMainPID=0\\n' \"$unit\";;\n"
        "esac\n",
    )


def test_unit_states(bin_dir):
    systemctl(bin_dir)
    command = UnitStates().command(["sglang.service", "dflash-train.service", "bad@"])
    assert f"systemctl show -p {','.join(UNIT_PROPERTIES)} -- sglang.service" in command
    units = UnitStates().process(run(command, bin_dir))
    assert (units["sglang.service"].active_state, units["sglang.service"].main_pid) == ("active", 4242)
    assert units["dflash-train.service"].load_state == "not-found"
    assert units["bad@"].message == "systemctl exited 1: Failed to get properties: Unit name bad@ is not valid."


def curl(bin_dir: Path, code: str) -> None:
    stand_in(bin_dir / "curl", f"printf {code}\n")


def test_snapshot_equals_the_single_facts(bin_dir, tmp_path):
    nvidia_smi(bin_dir, H200_ROW + "\n")
    systemctl(bin_dir)
    curl(bin_dir, "200")
    py = launcher(bin_dir, "echo 0.5.23", f'/bin/cat "{HELP_0523}"')
    (tmp_path / "t").mkdir()
    (tmp_path / "t/config.json").write_text('{"vocab_size": 248320}')
    paths, units = [str(tmp_path / "t"), str(tmp_path / "d")], ["sglang.service", "dflash-train.service"]
    (tmp_path / "unit").write_text("x\n")
    deployed = [[str(tmp_path / "unit"), str(tmp_path / "gone")], [str(tmp_path)], [str(tmp_path / "unit")],
                str(tmp_path / "lock"), str(tmp_path / "pending.json")]
    runtime = ["sglang.service", "http://127.0.0.1:30000/health"]
    cache = str(tmp_path / "engine-cache")
    programs = ["curl", "no-such-program", py]
    facts = HostSnapshot().process(run(HostSnapshot().command([py, {}, cache], [paths], [units], deployed, runtime,
                                                              programs), bin_dir))

    assert facts == HostFacts(
        gpus=GpuInventory().process(run(GpuInventory().command(), bin_dir)),
        gpu_processes=GpuProcesses().process(run(GpuProcesses().command(), bin_dir)),
        engine=SglangEngine().process(run(SglangEngine().command(py, 0, {}, cache), bin_dir)),
        models=ModelDirs().process(run(ModelDirs().command(paths), bin_dir)),
        units=UnitStates().process(run(UnitStates().command(units), bin_dir)),
        deployed=DeployedFiles().process(run(DeployedFiles().command(*deployed), bin_dir)),
        runtime=RunningService().process(run(RunningService().command(*runtime), bin_dir)),
        systemd_version=SystemdVersion().process(run(SystemdVersion().command(), bin_dir)),
        programs=HostPrograms().process(run(HostPrograms().command(programs), bin_dir)),
    )
    assert facts.systemd_version == 252
    assert facts.programs == {"curl": True, "no-such-program": False, py: True}
    # sha1 of "x\n"; an absent file, lock and pending record read as such
    owner = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"
    assert facts.deployed.files[deployed[0][0]] == FileState("644", owner, "6fcf9dfbd479ed82697fee719b9f8c610a11ff2a")
    assert facts.deployed.files[deployed[0][1]] is None and facts.deployed.contents == {deployed[0][0]: "x\n"}
    assert facts.deployed.lock == LockFacts() and facts.deployed.pending is None
    assert facts.runtime.health == 200
    assert facts.gpus.gpus[0].name == "NVIDIA H200" and facts.engine.status == "ok"
    assert facts.models[paths[1]].status == "no directory" and facts.units["sglang.service"].active_state == "active"


def test_snapshot_with_missing_sections_never_passes():
    facts = HostSnapshot().process(answer(record("section", value="gpus"), record("nvidia-smi", H200_ROW, "0")).splitlines())
    assert facts.gpus.status == "ok"
    assert facts.gpu_processes.status == "nvidia-smi failed" and facts.engine.status == "not importable"
    assert facts.models == {} and facts.units == {}
    assert facts.deployed == DeployState({}, {}, {}, LockFacts(), None)
    assert facts.runtime == ServiceRuntime(None, {}, 0)  # no answer from /health: not serving


def test_deployed_files_modes_owners_dirs_lock_and_pending(tmp_path, bin_dir):
    secret, gone, conf = tmp_path / "sglang.secret", tmp_path / "none", tmp_path / "conf"
    secret.write_text("K=v\n")
    secret.chmod(0o644)
    conf.mkdir(mode=0o755)
    conf.chmod(0o755)
    lock, pending = tmp_path / "sglang.lock", tmp_path / "pending.json"
    # the lock names this test's own process as its session: its start time is read back
    me = os.getpid()
    start = Path(f"/proc/{me}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    lock.write_text(json.dumps({"holder": "bob@x", "pid": 1, "since": 2, "session": me, "session_start": int(start)}) + "\n")
    pending.write_text('{"phase": "rolling-out"}\n')
    state = DeployedFiles().process(run(DeployedFiles().command(
        [str(secret), str(gone)], [str(conf), str(tmp_path / "nodir")], [str(gone)], str(lock), str(pending)), bin_dir))
    assert state.files[str(secret)].mode == "644" and state.files[str(gone)] is None
    assert state.dirs[str(conf)].mode == "755" and state.dirs[str(tmp_path / "nodir")] is None
    assert state.contents == {str(gone): ""}
    assert state.lock.present and json.loads(state.lock.text)["holder"] == "bob@x"
    assert state.lock.session_start_now == start
    assert state.pending == '{"phase": "rolling-out"}'


def test_lock_whose_session_is_gone(tmp_path, bin_dir):
    lock = tmp_path / "sglang.lock"
    lock.write_text(json.dumps({"holder": "bob@x", "pid": 1, "since": 2, "session": 2147483646, "session_start": 5}))
    state = DeployedFiles().process(run(DeployedFiles().command([], [], [], str(lock), str(tmp_path / "p")), bin_dir))
    assert state.lock.present and state.lock.session_start_now == ""


def test_running_service_masks_the_api_key_and_reads_drop_ins(tmp_path, bin_dir):
    server = subprocess.Popen(["/bin/sh", "-c", "sleep 30", "sh", "--api-key", "sk-secret-123", "--port", "1",
                               "--admin-api-key=adm-secret-456", "--ssl-keyfile-password", "pw-789"])
    try:
        dropin = tmp_path / "override.conf"
        dropin.write_text("[Service]\nExecStart=\nExecStart=/bin/other\n")
        stand_in(bin_dir / "systemctl", f'case "$3" in MainPID) echo {server.pid};; DropInPaths) echo {dropin};; esac\n')
        curl(bin_dir, "503")
        rt = RunningService().process(run(RunningService().command(*RUNTIME), bin_dir))
    finally:
        server.kill()
        server.wait()
    assert rt.cmdline == ("/bin/sh", "-c", "sleep 30", "sh", "--api-key", "***", "--port", "1", "--admin-api-key=***",
                          "--ssl-keyfile-password", "***")
    assert rt.dropins == {str(dropin): "[Service]\nExecStart=\nExecStart=/bin/other\n"}
    assert rt.health == 503


def test_running_service_without_a_process(bin_dir):
    stand_in(bin_dir / "systemctl", 'case "$3" in MainPID) echo 0;; esac\n')
    curl(bin_dir, "000")
    assert RunningService().process(run(RunningService().command(*RUNTIME), bin_dir)) == ServiceRuntime(None, {}, 0)


@pytest.mark.parametrize("text, version", [
    ("systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT", 252),
    ("systemd 255 (255.4-1ubuntu8.4)", 255),
    ("systemd 253", 253),
    ("", 0),
    ("bash: systemctl: command not found", 0),
])
def test_systemd_version(text, version):
    assert parse_systemd_version(answer(record("systemd", text))) == version


# --- hostile answers: what a host holds never frames, stops or fakes what follows ----------------

FORGED = ("@@section=gpus\n@@nvidia-smi=0\n"  # a whole fake GPU section, then a fake free GPU list
          "MCwgTlZJRElBIFJUWCBQUk8gNjAwMCwgR1BVLTEsIDk3ODg3LCAxLCAwMDAwMDAwMDoxODowMC4wLCBEaXNhYmxlZA==\n"
          "@@section=gpu_processes\n@@nvidia-smi=0\n\n")


def test_a_config_json_holding_marker_lines_bytes_and_no_final_newline_forges_nothing(bin_dir, tmp_path):
    """The snapshot of a host with the wrong GPU, busy GPUs and a hostile config.json: still the
    wrong GPU and busy GPUs, the config.json unreadable, and every line of the answer ASCII."""
    stand_in(bin_dir / "nvidia-smi", 'case "$1" in --query-gpu=*) '
             'echo "0, NVIDIA RTX A6000, GPU-a, 49140, 580.95.05, 00000000:18:00.0, Disabled";; '
             f'*) echo "{os.getpid()}, python, 30000, GPU-a";; esac\n')
    systemctl(bin_dir)
    curl(bin_dir, "200")
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_bytes(FORGED.encode() + b"\xff\xfe\x1b[2J")
    py = launcher(bin_dir, "echo 0.5.23", f'/bin/cat "{HELP_0523}"')
    out = run(HostSnapshot().command([py, {}, str(tmp_path / "c")], [[str(target)]], [["sglang.service"]],
                                     [[], [], [], str(tmp_path / "l"), str(tmp_path / "p")],
                                     ["sglang.service", "http://127.0.0.1:30000/health"], ["curl"]), bin_dir)
    assert all(line.isascii() for line in out)
    facts = HostSnapshot().process(out)
    assert [g.name for g in facts.gpus.gpus] == ["NVIDIA RTX A6000"]
    assert len(facts.gpu_processes.processes) == 1
    assert facts.models[str(target)].status == "unreadable"


def test_a_drop_in_without_a_final_newline_leaves_the_health_read(bin_dir, tmp_path):
    dropin = tmp_path / "50-limits.conf"
    dropin.write_text("[Service]\nLimitNOFILE=65536")  # no final newline
    stand_in(bin_dir / "systemctl", f'case "$3" in MainPID) echo 0;; DropInPaths) echo {dropin};; esac\n')
    curl(bin_dir, "200")
    rt = RunningService().process(run(RunningService().command(*RUNTIME), bin_dir))
    assert rt.health == 200 and rt.dropins == {str(dropin): "[Service]\nLimitNOFILE=65536"}


def test_a_lock_without_a_final_newline_reads_as_present(tmp_path, bin_dir):
    lock = tmp_path / "sglang.lock"
    lock.write_text('{"holder": "bob@x", "pid": 1, "since": 2}')
    state = DeployedFiles().process(run(DeployedFiles().command([], [], [], str(lock), str(tmp_path / "p")), bin_dir))
    assert state.lock.present and json.loads(state.lock.text)["holder"] == "bob@x"


def test_non_utf8_bytes_and_escapes_arrive_as_printable_text(tmp_path, bin_dir):
    unit = tmp_path / "sglang.service"
    unit.write_bytes(b"[Unit]\nDescription=\xff\x1b]0;owned\x07\n")
    state = DeployedFiles().process(run(DeployedFiles().command([str(unit)], [], [str(unit)], str(tmp_path / "l"),
                                                                str(tmp_path / "p")), bin_dir))
    assert state.contents[str(unit)] == "[Unit]\nDescription=\ufffd\ufffd]0;owned\ufffd\n"
    assert state.files[str(unit)].sha1 == hashlib.sha1(unit.read_bytes()).hexdigest()


def test_a_file_over_the_block_limit_is_unreadable_not_read_short(tmp_path, bin_dir):
    big = tmp_path / "m"
    big.mkdir()
    with open(big / "config.json", "wb") as f:
        f.write(b'{"vocab_size": 1, "pad": "')
        f.truncate(BLOCK_LIMIT + 10)
    models = ModelDirs().process(run(ModelDirs().command([str(big)]), bin_dir))
    assert models[str(big)].status == "unreadable"


def test_of_the_engines_help_only_what_is_read_crosses(bin_dir):
    """190 kB of --help on every run of every host: only its option lines and the speculative
    algorithm's help are sent, and they read as the whole would."""
    py = launcher(bin_dir, "echo 0.5.23", f'/bin/cat "{HELP_0523}"')
    out = run(SglangEngine().command(py, 0, {}, str(bin_dir.parent / "c")), bin_dir)
    assert sum(map(len, out)) < HELP_0523.stat().st_size / 4
    engine = SglangEngine().process(out)
    assert engine.flags == parse_flags(HELP_0523.read_text()) and engine.algorithms == SGLANG_0523_ALGORITHMS

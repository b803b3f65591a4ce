"""The programs a deploy runs on a host: asked for per feature, probed in one command, refused when missing."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

from builders import SPEC, good_facts, make_spec

from fleet.rollout.guards import preflight
from fleet.core.wire import NO_ANSWER
from fleet.rollout.prerequisites import (
    CURL,
    FLOCK,
    IP,
    SS,
    gateway_programs,
    missing,
    parse_probe,
    probe_command,
    replica_programs,
)
from fleet.spec import ClassSpec


def names(programs) -> list[str]:
    return [p.name for p in programs]


def test_every_replica_needs_curl_and_flock_and_systemd():
    assert names(replica_programs(SPEC)) == ["curl", "flock", "systemctl", "journalctl"]


def test_an_engine_or_a_revision_adds_the_python_that_runs_it():
    data = SPEC.model_dump(mode="json", exclude_unset=True)
    data["service"].pop("launcher")
    engine = ClassSpec.model_validate({**data, "engine": {"sglang": "sglang==0.5.23", "python": "/opt/py/bin/python3"}})
    assert names(replica_programs(engine))[-1] == "/opt/py/bin/python3"
    assert "engine.python" in replica_programs(engine)[-1].needed_by


def test_a_gateway_behind_a_floating_address_needs_ip_and_ss():
    assert IP not in gateway_programs("/usr/bin/python3", floating=False)
    assert {IP, SS} <= set(gateway_programs("/usr/bin/python3", floating=True))
    assert {CURL, FLOCK} <= set(gateway_programs("/usr/bin/python3", floating=False))


def probe(names_: list[str], path: str) -> dict[str, bool]:
    done = subprocess.run(["/bin/sh", "-c", probe_command(names_)], capture_output=True, text=True,
                          env={"PATH": path}, check=True)
    return parse_probe(done.stdout)


def test_the_probe_finds_what_the_path_has_and_nothing_else(tmp_path: Path):
    (tmp_path / "lab-curl").write_text("#!/bin/sh\n")
    (tmp_path / "lab-curl").chmod(0o755)
    (tmp_path / "lab-flock").write_text("not executable\n")
    odd = "/no such/`touch x`/python3"
    assert probe(["lab-curl", "lab-flock", "lab-ss", odd, "lab-curl"], f"{tmp_path}:/usr/bin:/bin") == \
        {"lab-curl": True, "lab-flock": False, "lab-ss": False, odd: False}
    assert not (Path.cwd() / "x").exists()


def test_a_host_answering_garbage_proves_no_program_there():
    said = "@@program=curl\n\n@@program=ss\n!!not base64\n@@program=\x1b[2J\nL3Vzci9iaW4vY3VybA==\n"
    assert parse_probe(said) == {"curl": False}
    many = "".join(f"@@program=p{i}\nL2Jpbi94\n" for i in range(1000))
    assert len(parse_probe(many)) == 64


def test_missing_or_unanswered_programs_are_named_with_their_package():
    found = missing([CURL, FLOCK, SS], {"curl": False, "flock": True})
    assert [(p.name, said) for p, said in found] == [
        ("curl", "none: `command -v curl` finds nothing on the host's PATH"), ("ss", NO_ANSWER)]


def test_a_replica_without_curl_is_refused_naming_curl_its_use_and_its_package():
    facts = good_facts()
    (v,) = preflight("h1", SPEC, replace(facts, programs={**facts.programs, "curl": False}))
    assert (v.host, v.check) == ("h1", "host program curl")
    assert "the readiness gate, the smoke test and the health check" in v.expected
    assert "Debian package curl" in v.expected and "finds nothing" in v.found


def test_a_host_that_says_nothing_of_its_programs_is_not_taken_as_having_them():
    checks = [v.check for v in preflight("h1", SPEC, replace(good_facts(), programs={}))]
    assert checks == [f"host program {n}" for n in names(replica_programs(SPEC))]


def test_a_keyed_class_needs_no_more_programs_than_another():
    assert replica_programs(make_spec(service={"api_key": {"env": "K"}})) == replica_programs(SPEC)

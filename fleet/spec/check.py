"""`make check`: validate every group_data file (and an inventory) offline; exit 2 naming each problem."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from fleet.spec.load import SpecError, class_files, gateway_files, load_class_specs, load_gateways, load_monitoring, \
    read_group_file, validate_gateway
from fleet.monitoring.rules import floors


def _gateway_tables(group_dir: Path) -> list[str]:
    """The gateway files' own problems, their routes unchecked: for when the classes do not validate."""
    problems = []
    for path in gateway_files(group_dir).values():
        try:
            validate_gateway(str(path), read_group_file(path)["gateway"])
        except SpecError as e:
            problems += e.problems
    return problems


def _refused(group_dir: Path, problems: list[str]) -> int:
    print(f"{len(problems)} problem(s) in {group_dir}/:", file=sys.stderr)
    for p in problems:
        print(f"  - {p}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    group_dir = Path("group_data")
    if not class_files(group_dir):
        print(f"no GPU class files in {group_dir.resolve()}/: expected group_data/<class>.py "
              "(run from the repo root)", file=sys.stderr)
        return 2
    try:
        specs = load_class_specs(group_dir)
    except SpecError as e:
        return _refused(group_dir, e.problems + _gateway_tables(group_dir))
    try:
        gateways = load_gateways(group_dir, specs)
        monitors = load_monitoring(group_dir, specs)
    except SpecError as e:
        return _refused(group_dir, e.problems)
    for inventory in argv:
        runpy.run_path(inventory)  # the inventory validates itself (check_or_exit) before anything connects
    for group, spec in specs.items():
        print(f"ok  {group_dir}/{group}.py: {spec.service.served_model_name} on {spec.gpu_class.gpu_count}x "
              f"{spec.gpu_class.accepted_models[0]}, speculative {spec.speculative.algorithm}; the canary first, then "
              f"{spec.rolling.max_unavailable} host(s) at a time")
    for group, gw in gateways.items():
        print(f"ok  {group_dir}/{group}.py: gateway smg {gw.version} on port {gw.port} routing {', '.join(gw.routes)}, "
              f"each replica drained out of it around its restart")
    for group, mon in monitors.items():
        floor = floors(mon, specs, Path("tuning"))
        alerted = ", ".join(f"{c} under {f:g}" for c, f in floor.items() if f is not None) or "no class"
        unset = [c for c, f in floor.items() if f is None and specs[c].speculative.algorithm != "none"]
        print(f"ok  {group_dir}/{group}.py: Prometheus every {mon.scrape_interval_s} s, {len(mon.receivers)} "
              f"receiver(s); accept length alert: {alerted}"
              + (f"; none for {', '.join(unset)} (no monitoring.alerts.accept_length_floor, no tuning/<class>.json)"
                 if unset else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The kernel's inotify limits, raised to what the lab's hosts need.

Every host's systemd, journald, path units and logind each hold inotify instances, all as this machine's root (the
containers share its user): past about 20 hosts the kernel's default of 128 instances per user runs out, path units
fail and sshd never comes up (issue 36's finding; docs/figures.md has the per-host counts). kind tells its users to
raise the same limits; the lab raises them itself, to what every lab up needs, never lowers them, and says so.
"""

from __future__ import annotations

from pathlib import Path

SYSCTL = Path("/proc/sys/fs/inotify")
# A lab host's own use, measured (docs/figures.md): 8 instances and 25-28 watches on a GPU, mirror or monitoring
# host, 10 and 29 on a gateway running keepalived and smg; with room for more units.
PER_HOST = {"max_user_instances": 12, "max_user_watches": 64}
# What the rest of this machine may hold as root beside the lab (its own systemd, an editor, a test runner).
MACHINE = {"max_user_instances": 128, "max_user_watches": 8192}


def need(hosts: int) -> dict[str, int]:
    """Each limit `hosts` lab hosts need (every lab up on this machine, together) beside the machine's own use."""
    return {key: MACHINE[key] + hosts * PER_HOST[key] for key in PER_HOST}


def ensure(hosts: int, log, sysctl: Path = SYSCTL) -> dict[str, tuple[int, int]]:
    """Raise each limit below what `hosts` hosts need to that; returns {limit: (was, now)} of those raised."""
    raised = {}
    for key, wanted in need(hosts).items():
        path = sysctl / key
        was = int(path.read_text().split()[0])
        if was < wanted:
            path.write_text(f"{wanted}\n")
            raised[key] = (was, wanted)
            log(f"raised fs.inotify.{key} from {was} to {wanted}: {hosts} lab hosts' systemd need about "
                f"{PER_HOST[key]} each (below that, past ~20 hosts, their path units fail and sshd never starts)")
    return raised

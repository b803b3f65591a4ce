"""A gateway group without a single point of failure: two or more smg hosts behind one floating address
that keepalived (VRRP) moves to a ready gateway when the one holding it fails, and the decisions of
rolling the gateways themselves one at a time without failing a request (fleet/gateway/group_turn.py).

Clients use the address; the gateway holding it (VRRP's master) answers ARP for it. keepalived on each
gateway tracks its smg two ways: a script polling smg's /readiness, and a file the smg unit writes the
moment its process ends (ExecStopPost), so a crash gives the address away at once, not a poll later.
The deploy holds a gateway out of the election with a third file, the handoff file, in its own turn.

A planned move keeps the requests in flight (fleet/programs/handoff.sh): before the address leaves X
for Y, X keeps it on its loopback (answering no ARP) and Y routes the packets of connections it does not
know (TCP without SYN, new to its conntrack) to X, so X's streams end there while every new connection
lands on Y; once X restarted and drained, the route and the loopback address go. Plain data in,
verdicts out: tasks/gateway.py and tasks/gateway_turns.py do the talking. Facts about keepalived 2.2.7: its
keepalived.conf(5).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from fleet.core import controller, layout
from fleet.spec import Bool, Int, Kind, Number, Source, Strict
from fleet.core.wire import excerpt

PACKAGES = ("keepalived", "nftables")  # Debian's: the address's election; the handoff's route for old connections
UNIT = "keepalived.service"
CONFIG = "/etc/keepalived/keepalived.conf"
AUTH_FILE = "/etc/keepalived/sglang-fleet-auth.conf"  # 0600: VRRP's password, included by CONFIG
NOTIFY = "/usr/local/lib/sglang-fleet/vrrp-notify"  # writes each state change (MASTER, BACKUP, FAULT) and when
SYSCTL_FILE = "/etc/sysctl.d/60-sglang-fleet-gateway.conf"
# keepalived watches its track files' directory from its start (inotify): it must be there before keepalived is,
# at every boot too (/run is a tmpfs)
DROPIN = f"{layout.UNITS_DIR}/keepalived.service.d/sglang-fleet.conf"
ROUTES = 5601  # the handoff's routing table (fleet/programs/handoff.sh's routes=), read by make status
RUN_DIR = layout.LOCK_ROOT  # tmpfs: a reboot clears the handoff file, and with it a hold a lost run left
TOP_PRIORITY, PRIORITY_STEP = 200, 10  # the group's first host in the inventory, the next 10 lower, ...
# The track script: smg's /readiness polled every second, 2 failures to give the address away, 2 successes
# (a ready smg) to be eligible again.
TRACK_INTERVAL_S, TRACK_FALL, TRACK_RISE = 1, 2, 2
TRACK_CURL = "/usr/bin/curl"  # keepalived's enable_script_security wants the script by a root-owned path
# A gateway's ARP and redirects, set for good on a gateway of a group (the handoff needs them at any moment):
# answer ARP only for the addresses of the interface asked (not the loopback's floating address), never
# announce the floating address as a source, send no ICMP redirect while routing a handoff's packets back out.
SYSCTLS = {"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2",
           "net.ipv4.conf.all.send_redirects": "0", "net.ipv4.conf.default.send_redirects": "0"}
VRRP_PASSWORD = re.compile(r"[!-~]{1,8}")  # VRRPv2's simple password: 8 bytes, what keepalived.conf can quote
PASSWORD_RULE = "1 to 8 printable ASCII characters without spaces, quotes, backslashes, # or ! (VRRP's password)"


def _ipv4(v: str) -> str:
    try:
        address = ipaddress.IPv4Address(v)
    except ValueError:
        raise ValueError("an IPv4 address, e.g. 10.0.0.100") from None
    if address.is_loopback or address.is_multicast or address.is_unspecified or address.is_link_local:
        raise ValueError("an address of the gateways' own subnet: not loopback, multicast, link-local or 0.0.0.0")
    return str(address)


FloatingAddress = Annotated[str, AfterValidator(_ipv4), Kind("IPv4 address")]


class Floating(Strict):
    """The clients' address in front of a gateway group of two or more hosts (keepalived, VRRP): held by one
    ready gateway, moved to another within `failover_s` when it fails. Priority follows the inventory: the
    group's first host is preferred (200), each next one 10 lower."""

    address: FloatingAddress = Field(description="The floating IPv4 address: in the subnet of an interface of every "
                                     "gateway of the group (found on each host), on no host of its own, neither the "
                                     "subnet's network nor its broadcast address.")
    router_id: Int = Field(ge=1, le=255, description="VRRP's virtual router id, 1..255: unique among the VRRP "
                           "routers of that subnet (two groups with one id fight over each other's address), and "
                           "among the gateway groups of group_data.")
    password: Source = Field(description="Where VRRP's password comes from (a secret source): "
                             f"{PASSWORD_RULE}. It keeps a stray router on the subnet from taking the address; it is "
                             "not encryption.")
    advert_interval_s: Int = Field(1, ge=1, le=255, description="Seconds between the holder's VRRP advertisements, "
                                   "1..255: a holder silent for 3 of them (its box or link lost) is replaced.")
    failover_s: Number = Field(5, ge=1, le=600, description="The bound the address moves within when its holder "
                               "fails, 1..600 s: at least 3 x advert_interval_s + 1 (VRRP's master-down interval); a "
                               "crashed smg gives it away at once. The lab's failover test holds the pair to it.")
    preempt: Bool = Field(False, description="The preferred gateway takes the address back once it is ready again "
                          "(after preempt_delay_s). False (keepalived's nopreempt): the address stays where it is, "
                          "one move per failure; true moves it twice, cutting the requests in flight on the other "
                          "at the second move (a deploy's own moves keep them: the handoff). Either way, two "
                          "gateways that both hold it (a partition healed) leave it to the higher priority (VRRP).")
    preempt_delay_s: Int = Field(0, ge=0, le=1000, description="With preempt, how long a gateway back and ready "
                                 "waits before taking the address back, 0..1000 s.")
    garp_repeat: Int = Field(5, ge=1, le=100, description="Gratuitous ARPs in each announcement of the address by the "
                             "gateway holding it, 1..100 (keepalived's default): when it takes the address, 5 s later "
                             "again, and when it meets another holder of lower priority (a healed partition: it keeps "
                             "the address, the other gives it up), so that clients and switches follow at once.")
    garp_refresh_s: Int = Field(10, ge=0, le=3600, description="While it holds the address, the gateway announces it "
                                "again every garp_refresh_s, 0..3600 s (0: only when it moves): the bound within which "
                                "a client that missed every announcement (a frame lost) finds the holder again. While "
                                "two gateways are apart and both hold it, a client that reaches both follows each "
                                "refresh in turn.")

    @model_validator(mode="after")
    def _bounds(self) -> Floating:
        if self.failover_s < 3 * self.advert_interval_s + 1:
            raise ValueError(f"failover_s {self.failover_s:g} is under VRRP's master-down interval: expected at least "
                             f"3 x advert_interval_s + 1 = {3 * self.advert_interval_s + 1} s")
        if self.preempt_delay_s and not self.preempt:
            raise ValueError("preempt_delay_s without preempt: the address never moves back by itself (set "
                             "preempt = True, or leave preempt_delay_s out)")
        return self


def priority(index: int) -> int:
    """The VRRP priority of the group's index-th host (inventory order), never under 1."""
    return max(1, TOP_PRIORITY - PRIORITY_STEP * index)


def password_problem(value: str) -> str | None:
    """Why a VRRP password read from its source cannot be used (never showing it), or None."""
    if VRRP_PASSWORD.fullmatch(value) and not set(value) & set("\"'#!\\"):
        return None
    return f"expected {PASSWORD_RULE}, found {len(value)} characters that are not"


def address_problems(floats: dict[str, Floating], groups: dict[str, list[str]],
                       hosts_data: dict[str, dict]) -> list[str]:
    """The floating addresses against what the inventory shows (each host's ssh_hostname, else its name, where
    that is an IPv4 address): no host's own. The subnet is known only from the hosts' interfaces at deploy
    (interface_for refuses its network and broadcast addresses there)."""
    problems = []
    for group, f in floats.items():
        where = f"group_data/{group}.py: gateway.floating"
        for h, data in sorted(hosts_data.items()):
            said = str(data.get("ssh_hostname") or h)
            try:
                taken = ipaddress.IPv4Address(said) == ipaddress.IPv4Address(f.address)
            except ValueError:  # a DNS name: not known before the deploy resolves it
                continue
            if taken:
                role = f"{group}'s gateway" if h in groups.get(group, []) else "host"
                problems.append(f"{where}.address: {f.address} is the address of {role} {h} in the inventory: "
                                "expected a free host address of its subnet (keepalived would claim that host's)")
    return problems


def router_id_problems(floats: dict[str, Floating]) -> list[str]:
    """Each group's VRRP router id its own: which subnet a group's address is in shows only at deploy, and two
    groups with one id on one subnet take each other's address."""
    return [f"group_data/{group}.py: gateway.floating.router_id: {f.router_id} is also gateway group "
            f"{', '.join(same)}'s: expected one virtual router id per gateway group"
            for group, f in floats.items()
            for same in [sorted(g for g, other in floats.items() if g != group and other.router_id == f.router_id)]
            if same]


def instance(group: str) -> str:
    """The VRRP instance's name in keepalived.conf: the gateway group's."""
    return f"sglang_{group}"


def handoff_file(unit: str) -> str:
    """1 while the deploy holds this gateway out of the election (its turn), else 0: keepalived's track_file."""
    return f"{RUN_DIR}/{unit}.handoff"


def stopped_file(unit: str) -> str:
    """1 from the moment the smg unit's process ends (ExecStopPost) to its next start: keepalived's track_file."""
    return f"{RUN_DIR}/{unit}.stopped"


def state_file(group: str) -> str:
    """The VRRP instance's last state and when it came (NOTIFY writes it): `MASTER 1796394349.91`."""
    return f"{RUN_DIR}/{instance(group)}.vrrp"


@dataclass(frozen=True)
class Interface:
    name: str
    network: ipaddress.IPv4Interface  # the address on it, with its prefix
    secondary: bool = False  # an address added beside the interface's first in its subnet (keepalived's)


def interface_for(address: str, interfaces: list[Interface]) -> tuple[Interface | None, str]:
    """The one interface whose subnet holds the floating address, or (None, why not). The address itself, where
    this host holds it (a secondary address, or on the loopback for a handoff), is not the host's own."""
    vip = ipaddress.IPv4Address(address)
    own = [i for i in interfaces if i.network.ip == vip and not i.secondary and i.name != "lo"]
    if own:
        return None, f"{address} is {own[0].name}'s own address: expected an address no host has"
    found = [i for i in interfaces if vip in i.network.network and i.name != "lo" and i.network.ip != vip]
    if len(found) == 1:
        subnet = found[0].network.network
        if subnet.prefixlen < 31 and vip in (subnet.network_address, subnet.broadcast_address):
            which = "network" if vip == subnet.network_address else "broadcast"
            return None, (f"{address} is the {which} address of {found[0].name}'s subnet {subnet}: expected a free "
                          "host address of it")
        return found[0], ""
    seen = ", ".join(f"{i.name} {i.network}" for i in interfaces if i.name != "lo" and i.network.ip != vip) or "none"
    if not found:
        return None, f"{address} is in the subnet of none of its interfaces ({seen}): expected one"
    return None, f"{address} is in the subnet of {len(found)} interfaces ({seen}): expected one"


IFACE_LINE = re.compile(r"^\d+:\s+([A-Za-z0-9_.@-]{1,32})\s+inet\s+([0-9.]{7,15}/[0-9]{1,2})\b([^\\]*)")


def parse_interfaces(text: str) -> list[Interface]:
    """`ip -o -4 addr show`: each interface's IPv4 addresses and prefixes; lines of another shape are skipped."""
    out = []
    for line in text.splitlines()[:256]:
        m = IFACE_LINE.match(line)
        if m:
            try:
                out.append(Interface(m.group(1).split("@")[0], ipaddress.IPv4Interface(m.group(2)),
                                     " secondary" in m.group(3)))
            except ValueError:
                continue
    return out


# --- the host's side: what keepalived and the handoff left there (facts/gateway.py reads it) -------------

VRRP_STATES = ("MASTER", "BACKUP", "FAULT", "STOP")


@dataclass(frozen=True)
class Vrrp:
    """What one gateway's keepalived and handoff say now."""

    installed: bool = False  # keepalived and nftables both
    active: bool = False  # keepalived.service
    enabled: bool = False  # keepalived.service, at boot
    state: str = ""  # its instance's last state (VRRP_STATES), '' before the first
    since: float | None = None  # when it came, seconds since the epoch by the host's clock
    holds: bool = False  # the floating address is on an interface (not the loopback): it answers ARP for it
    on_loopback: bool = False  # the handoff's hold: its old connections still land here
    forwards_to: str = ""  # the handoff's route: the address it sends other gateways' old connections to
    handoff: bool = False  # the deploy holds it out of the election
    stopped: bool = False  # its smg's process has ended and not started again
    connections: int | None = None  # established client connections on smg's port
    problem: str = ""  # what it answered that is none of these


def parse_vrrp(said: dict[str, str]) -> Vrrp:
    """The `@@vrrp-*` records of facts/gateway.py's command (said: record key -> its text)."""
    problems = []
    words = said.get("vrrp-state", "").split()
    state, since = "", None
    if words:
        try:
            state, since = words[0], float(words[1]) if len(words) > 1 else None
        except ValueError:
            state = ""
        if state not in VRRP_STATES:
            problems.append(f"vrrp state {excerpt(said['vrrp-state'])} is not one of {', '.join(VRRP_STATES)}")
            state, since = "", None
    where = said.get("vrrp-address", "").split()
    forwards = said.get("vrrp-forward", "")
    try:
        forwards = str(ipaddress.IPv4Address(forwards)) if forwards else ""
    except ValueError:
        problems.append(f"handoff route {excerpt(forwards)} is not an IPv4 address")
        forwards = ""
    connections = said.get("vrrp-connections", "")
    return Vrrp(installed=said.get("vrrp-installed") == "yes", active=said.get("vrrp-active") == "active",
                enabled=said.get("vrrp-enabled") == "enabled",
                state=state, since=since, holds=any(d != "lo" for d in where[:16]), on_loopback="lo" in where[:16],
                forwards_to=forwards, handoff=said.get("vrrp-handoff") == "1", stopped=said.get("vrrp-stopped") == "1",
                connections=connection_count(connections),
                problem="; ".join(problems))


def connections_command(port: int) -> str:
    """The established client connections on smg's port, counted only where ss ran: a missing or failing ss prints
    nothing, never "0" (`ss | wc -l` counted 0 lines of a program that was not there)."""
    return (f"out=$(ss -Htn state established '( sport = :{port} )') && "
            "printf '%s\\n' \"$out\" | { grep -c . || true; }")  # grep -c exits 1 when it counts 0


def connection_count(text: str) -> int | None:
    """ss's count as connections_command prints it; None for anything but ASCII digits (not an answer)."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,8}", text, re.ASCII) else None


# --- the handoff's program on the host -----------------------------------------------------------

NOTIFY_PROGRAM = controller.program("vrrp-notify.sh")


def handoff_command(action: str, *args: str) -> str:
    """fleet/programs/handoff.sh ACTION ARGS, sent as one command (its comments left out)."""
    return controller.shell("handoff.sh", action, *args)


def set_handoff(unit: str, on: bool) -> str:
    """Hold the gateway out of the election (keepalived reads the file at once: FAULT, the address given
    away) or let it back in. Written in place: keepalived's inotify sees a write, not a rename over it."""
    return f"mkdir -p {RUN_DIR} && echo {int(on)} > {shlex.quote(handoff_file(unit))}"

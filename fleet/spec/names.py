"""Names that reach a host: addresses and host names, systemd unit names, environment variables."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated
from urllib.parse import SplitResult, unquote, urlsplit

from pydantic import AfterValidator

from fleet.core import layout
from fleet.core.wire import clipped
from fleet.spec.text import SEGMENT_BYTES, Kind

# --- names: hosts, units, environment variables ----------------------------------------------

# \Z, not $: $ also matches before a final newline ("gpu-1\n" would pass)
HOST_NAME = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")
# Names that resolve to the host itself (RFC 6761 reserves *.localhost; Debian's /etc/hosts adds the ip6- ones).
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def _host(v: str) -> str:
    # It lands in URLs and shell commands on the host: an address or a name, nothing else. A zone
    # (fe80::1%eth0) is refused: Python's parser takes any text after the %.
    try:
        ipaddress.ip_address(v)
    except ValueError:
        if not HOST_NAME.match(v):
            raise ValueError("an IP address (e.g. 0.0.0.0, 127.0.0.1, ::) or a host name") from None
    if "%" in v:
        raise ValueError("an IP address without a zone (%...) or a host name")
    return v


HostAddress = Annotated[str, AfterValidator(_host), Kind("address or host name")]

HOST_RULE = ("a DNS name (letters, digits and '-', labels of 1 to 63, at most 253 in all), an IP address or "
             "@local")
LOCAL_CONNECTOR = "@local"  # pyinfra's name for the machine it runs on: a fixed word, no path, no line break


def host_name_problem(name: object) -> str | None:
    """Why an inventory host name (or its ssh_hostname) may not reach a file, a path or a command (keepalived.conf,
    the mesh TLS files named by {host}, URLs, monitoring labels, shell commands), or None: a DNS name or an address,
    so no line break, space, path separator, `..`, `$`, `@` or quote."""
    if name == LOCAL_CONNECTOR:
        return None
    if isinstance(name, str):
        try:
            _host(name)
            return None
        except ValueError:
            pass
    return f"expected {HOST_RULE}, found {shown_name(name)}" + (
        "" if isinstance(name, str) else f" (a {type(name).__name__})")


def shown_name(name: object) -> str:
    """A host name as a message quotes it: escaped (repr), so that a line break or a trailing space shows, and
    bounded."""
    return clipped(repr(name))


# Services whose webhook URL is its secret (host, path prefix): Slack's /services/T../B../TOKEN, Discord's
# /api/webhooks/ID/TOKEN, Teams' incoming webhooks (*.webhook.office.com/webhookb2/...)
WEBHOOK_SERVICES = (("hooks.slack.com", "/services/"), ("discord.com", "/api/webhooks/"),
                    ("discordapp.com", "/api/webhooks/"), ("webhook.office.com", "/"),
                    ("outlook.office.com", "/webhook"))
# A run of letters and digits this long with a digit or both cases in it is a token's, not a path's word
# (simple, whl, cu128, pypi-remote-2024 are words; a 24-character Slack token or a 32-digit hex key is not)
TOKEN_RUN = re.compile(r"[A-Za-z0-9]{16,}")


def path_secret(url: str) -> bool:
    """A URL whose path holds a secret: a known service's webhook path, or a token-like run in a segment (one
    that cannot be read as a URL counts as holding one)."""
    try:
        u = urlsplit(url)
        host = (u.hostname or "").lower()
    except ValueError:
        return True
    if any((host == h or host.endswith("." + h)) and u.path.startswith(p) for h, p in WEBHOOK_SERVICES):
        return True
    return any(any(c.isdigit() for c in run) or run not in (run.lower(), run.upper())
               for run in TOKEN_RUN.findall(unquote(u.path)))


def split_http(v: str) -> SplitResult | None:
    """v's parts as an http(s) URL to a host, or None: another scheme, no host, a space, a bad [address] or port
    (Python's parser raises on those, in its own words)."""
    try:
        u = urlsplit(v)
        readable = u.scheme in ("http", "https") and u.hostname and (u.port is None or u.port > 0)
    except ValueError:
        return None
    return u if readable and not any(c.isspace() for c in v) else None


def http_url(v: str, what: str, example: str, why_no_secret: str) -> str:
    """An http(s) URL to a host (`what`, e.g. "a package index"), and none of where a token may sit: no
    credentials, no query, no fragment, no token in its path (why_no_secret: where it would show, where it
    goes instead)."""
    u = split_http(v)
    if u is None:
        raise ValueError(f"an http(s) URL of {what}, e.g. {example}")
    if u.username is not None or u.password is not None:
        raise ValueError(f"a URL of {what} without credentials (user:password@): {why_no_secret}")
    if "?" in v or "#" in v:
        raise ValueError(f"a URL of {what} without a query (?...) or fragment (#...), which may hold a token (not "
                         f"shown): {why_no_secret}")
    if path_secret(v):
        raise ValueError(f"a URL of {what} without a token in its path (a known service's webhook path, or a run of "
                         f"16 or more letters and digits with a digit or both cases; not shown): {why_no_secret}")
    _host(u.hostname)
    return v


def is_loopback(host: str) -> bool:
    """An address or name only the host itself reaches (127.0.0.0/8, ::1, ::ffff:127.x, localhost)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower()
        return name in LOCAL_NAMES or name.endswith(".localhost")
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


# systemd's unit_name_is_valid(): ASCII letters, digits and :-_.\ before the type suffix, '@'
# only between a template's prefix and its instance; at most 255 characters with the suffix.
# A leading '-' would be read as an option by systemctl (`-H host` connects elsewhere), and the
# name is a path component (/var/lib/sglang-fleet/<unit>/): no leading '.', no '.' or '..'.
UNIT_NAME = re.compile(r"^(?![.-])[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\@-]+)?\Z")
UNIT_NAME_MAX = 255
UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice",
              "scope")
UNIT_RULE = "ASCII letters, digits and : - _ . \\ only, not starting with - or ."
# The deploy names files after a service's unit (fleet/core/layout.py): the longest, staged, must fit in
# Linux's 255 bytes of a file name, or every rollout fails at its first upload (ASCII: a byte a character).
SERVICE_UNIT_MAX = SEGMENT_BYTES - max(len(n) for n in layout.staged_names(""))


def _unit_prefix(prefix: str, instance: bool) -> None:
    if len(prefix) + len(".service") > UNIT_NAME_MAX:
        raise ValueError(f"a systemd unit name of at most {UNIT_NAME_MAX} characters with .service; "
                         f"found {len(prefix) + len('.service')}")
    if not UNIT_NAME.match(prefix) or (not instance and "@" in prefix):
        where = "'@' only as in name@instance" if instance else "no '@'"
        raise ValueError(f"a systemd unit name: {UNIT_RULE}, {where}")


def _service_unit(v: str) -> str:
    if v.endswith(".service"):
        raise ValueError("a systemd unit name without '.service' (it is added)")
    if len(v) > SERVICE_UNIT_MAX:
        longest = max(layout.staged_names("U"), key=len)
        raise ValueError(f"a systemd unit name of at most {SERVICE_UNIT_MAX} characters: the deploy names files after "
                         f"it, the longest {longest}, each within {SEGMENT_BYTES} bytes; found {len(v)}")
    _unit_prefix(v, instance=False)
    return v


def _workload_unit(v: str) -> str:
    # systemctl reads a name without a unit type as NAME.service, and so do we
    _, dot, suffix = v.rpartition(".")
    if dot and suffix in UNIT_TYPES and suffix != "service":
        raise ValueError(f"a .service unit; found a .{suffix}: a name here is a service's (a scope is a table "
                         "with name, scope and give_back)")
    full = v if dot and suffix == "service" else f"{v}.service"
    _unit_prefix(full.removesuffix(".service"), instance=True)
    return full


ServiceUnit = Annotated[str, AfterValidator(_service_unit), Kind("unit name")]
WorkloadUnit = Annotated[str, AfterValidator(_workload_unit), Kind("unit name")]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_RULE = "letters, digits and _, not starting with a digit"

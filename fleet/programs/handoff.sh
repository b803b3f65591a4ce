#!/bin/sh
# A gateway's side of a handoff of the floating address (fleet/gateway/floating.py): the gateway giving the address
# away keeps it on its loopback, so its connections still land there; the one taking it routes the packets
# of connections it does not know back to the first. fleet/gateway/floating.py sends this file, its comment and
# blank lines left out, as `( set -- ACTION ARGS...; <this file> )`; by hand: sh handoff.sh ACTION ARGS...
#
#   hold    ADDRESS on|off              the address on the loopback (/32), or not
#   forward ADDRESS PORT PEER|-         route the packets to ADDRESS:PORT that open no connection here (TCP
#                                       without SYN, new to conntrack) to PEER; `-`: no such route
#
# The route: an nftables table marks those packets (and their connection), a rule sends marked packets to
# a table of their own whose one route is the peer, ahead of the local table (moved from 0 to 200 for it),
# and the interface towards the peer forwards them (its forwarding as it was noted in RUN_DIR, put back after).
# Undone in the reverse order; each step may run twice.
set -eu

action=$1 address=$2
table=sglang_fleet_handoff mark=0x5f1 routes=5601 run=/run/sglang-fleet

case "$action" in
hold)
  if [ "$3" = on ]; then
    ip -4 addr show dev lo | grep -q " $address/32 " || ip addr add "$address/32" dev lo
  else
    ip addr del "$address/32" dev lo 2>/dev/null || true
  fi
  ;;
forward)
  port=$3 peer=$4
  nft delete table ip "$table" 2>/dev/null || true
  ip rule del pref 100 fwmark "$mark" lookup "$routes" 2>/dev/null || true
  ip route flush table "$routes" 2>/dev/null || true
  if [ "$peer" = - ]; then
    ip rule show | grep -q '^0:.*lookup local' || ip rule add pref 0 lookup local
    ip rule del pref 200 lookup local 2>/dev/null || true
    for noted in "$run"/handoff-forwarding.*; do
      [ -f "$noted" ] || continue
      sysctl -qw "net.ipv4.conf.${noted#"$run"/handoff-forwarding.}.forwarding=$(cat "$noted")" && rm -f "$noted"
    done
    exit 0
  fi
  dev=$(ip -4 route get "$peer" | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -n 1)
  [ -n "$dev" ] || { echo "no route to $peer" >&2; exit 1; }
  mkdir -p "$run"
  [ -f "$run/handoff-forwarding.$dev" ] || sysctl -n "net.ipv4.conf.$dev.forwarding" > "$run/handoff-forwarding.$dev"
  sysctl -qw "net.ipv4.conf.$dev.forwarding=1" "net.ipv4.conf.$dev.send_redirects=0"
  nft -f - <<EOF
table ip $table {
  chain prerouting {
    type filter hook prerouting priority mangle; policy accept;
    ip daddr $address tcp dport $port ct state new tcp flags & syn == 0 ct mark set $mark
    ct mark $mark meta mark set $mark
  }
}
EOF
  ip route replace "$address/32" via "$peer" dev "$dev" table "$routes"
  ip rule add pref 100 fwmark "$mark" lookup "$routes"
  ip rule show | grep -q '^200:.*lookup local' || ip rule add pref 200 lookup local
  ip rule del pref 0 lookup local 2>/dev/null || true
  ;;
*)
  echo "handoff.sh: unknown action $action" >&2
  exit 2
  ;;
esac

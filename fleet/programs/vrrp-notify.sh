#!/bin/sh
# keepalived's notify script on a gateway of a group (fleet/gateway/floating.py NOTIFY): keepalived runs it at each
# state change of a VRRP instance as `vrrp-notify INSTANCE NAME STATE PRIORITY`; it keeps the state and when
# it came (seconds since the epoch) in /run/sglang-fleet/NAME.vrrp, which make status and the deploy read.
set -eu
[ "$1" = INSTANCE ] || exit 0
mkdir -p /run/sglang-fleet
printf '%s %s\n' "$3" "$(date +%s.%N)" > "/run/sglang-fleet/$2.vrrp.tmp"
mv -f "/run/sglang-fleet/$2.vrrp.tmp" "/run/sglang-fleet/$2.vrrp"

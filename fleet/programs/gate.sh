#!/bin/sh
# The readiness gate's poll on the host (fleet/rollout/gate.py): one observation of the service, or the wait
# for its next change. fleet/rollout/gate.py sends this file as `( set -- ACTION ARGS...; <this file> )`,
# after the restart's commands (under their `set -e`: nothing here fails it); by hand:
# sh gate.sh ACTION ARGS...
#
#   observe UNIT URL
#   wait    UNIT URL PREVIOUS BUDGET_S INTERVAL_S
#
# UNIT: the service's unit; URL: its /health; PREVIOUS: the observation the controller saw last;
# BUDGET_S: whole seconds the wait may take; INTERVAL_S: seconds between two polls.
#
# Both print @@observation (fleet.rollout.gate.OBSERVATION_MARK), then the observation: the unit's
# ActiveState, SubState, MainPID, NRestarts and Result as `systemctl show` prints them, health=CODE
# (/health's HTTP status, 000: no answer) and probe=EXIT (curl's exit status; 126/127: curl could
# not run). wait returns at the first observation that differs from PREVIOUS, or with the last one
# once BUDGET_S have passed: one SSH command per change of state, not one per poll.

action=$1 unit=$2 url=$3

observe() {
  systemctl show -p ActiveState,SubState,MainPID,NRestarts,Result -- "$unit" || :
  # never through a proxy the host's environment names (curl would send even 127.0.0.1 there); an
  # IPv6 address in brackets is an address, not one of curl's URL globs
  if h=$(curl --noproxy '*' --globoff -s -o /dev/null -w '%{http_code}' --max-time 2 "$url"); then c=0; else c=$?; fi
  printf 'health=%s\nprobe=%s\n' "$h" "$c"
}

case $action in
  observe)
    obs=$(observe) ;;
  wait)
    prev=$4 end=$(( $(date +%s) + $5 ))
    while :; do
      obs=$(observe)
      if [ "$obs" != "$prev" ] || [ "$(date +%s)" -ge "$end" ]; then break; fi
      sleep "$6"
    done ;;
  *)
    echo "gate.sh: unknown action: $action" >&2
    exit 2 ;;
esac
printf '@@observation\n%s\n' "$obs"

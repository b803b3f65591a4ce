#!/bin/sh
# A workload's bare processes stopped (fleet/rollout/commands.py stop_workloads_command): SIGTERM to each, then SIGKILL to one
# still running after its own number of ticks; each signal only while the pid is still that process (its start time,
# field 22 of /proc/PID/stat after the name in parentheses, unchanged, and not a zombie), never a pid reused since.
# fleet/rollout/commands.py sends this file, its comments and blank lines left out, as `( set -- ARGS...; <this file> )`;
# by hand: sh stop_processes.sh TICK_S PID START TICKS [PID START TICKS]...
#
#   TICK_S             how often it looks whether they are gone (seconds)
#   PID START TICKS    a process: its pid, its start time (clock ticks after boot), its ticks before SIGKILL
alive() {
  s=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1,20)
  [ "${s#* }" = "$2" ] && [ "${s%% *}" != Z ]
}
tick=$1
shift
processes=$*  # numbers only: split on blanks again below
# shellcheck disable=SC2086  # the list of numbers, split into the positional parameters on purpose
set -- $processes
while [ $# -ge 3 ]; do
  alive "$1" "$2" && kill -TERM "$1" 2>/dev/null
  shift 3
done
i=0
while :; do
  left=no
  # shellcheck disable=SC2086  # as above
  set -- $processes
  while [ $# -ge 3 ]; do
    if alive "$1" "$2"; then
      if [ $i -ge "$3" ]; then kill -KILL "$1" 2>/dev/null; else left=yes; fi
    fi
    shift 3
  done
  [ $left = no ] && break
  sleep "$tick"
  i=$((i + 1))
done

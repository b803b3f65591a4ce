#!/bin/sh
# The per-host deploy lock on the host (fleet/rollout/lock.py): take it, renew its lease, release it, or
# read its session for preflight. fleet/rollout/lock.py sends this file, its comment and blank lines left
# out, as `( set -- ACTION ARGS...; <this file> )`; by hand: sh lock.sh ACTION ARGS...
#
#   take    ROOT LOCK LEASE WAIT_S LEASE_S BLOCK_LIMIT SEEN HOLDER PID SINCE
#   renew   ROOT LOCK LEASE WAIT_S LEASE_S
#   release ROOT LOCK LEASE WAIT_S
#   session ROOT LOCK LEASE WAIT_S
#
# ROOT: the locks' directory, flock'd while a lock is compared and replaced; LOCK, LEASE: the
# lock file and its lease; WAIT_S: how long flock waits for another of these commands; LEASE_S:
# how long a lease holds from now, by the host's clock; BLOCK_LIMIT: the most bytes of a record's
# data (fleet.core.wire); SEEN: the lock as preflight read it, "absent" or "present:TEXT"; HOLDER (a
# JSON string), PID, SINCE: the owner written into the lock.
#
# What it prints is fleet/rollout/lock.py's: take: @@lock=taken, or @@lock=refused and the lock's text
# as base64, exit 75 (REFUSED_EXIT: the lock is not what preflight saw); renew: @@lease=renewed,
# or @@lease=not-ours (the lock is gone or another deploy's); release: nothing (another deploy's
# lock stays); session: the start time of the process that has the lock's session pid now, or 0
# (LEASE_RAN_OUT) when the lease is past by the host's clock. Exit 75 too where the flock is not had.

action=$1 root=$2 lock=$3 lease=$4 wait_s=$5
shift 5

# Field $2 of /proc/$1/stat, counted after the command name: 2 is the parent pid, 20 the start time.
field() {
  sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f"$2"
}

# The SSH session this runs in: the sshd process above this shell and its start time, so that a
# reused pid is never taken for it; null and null without sshd above (a connector without SSH).
find_session() {
  s=$$
  while [ "${s:-1}" -gt 1 ]; do
    case "$(cat "/proc/$s/comm" 2>/dev/null)" in sshd|sshd-session) break;; esac
    s=$(field "$s" 2)
  done
  if [ "${s:-1}" -gt 1 ]; then session=$s; session_start=$(field "$s" 20); else session=null; session_start=null; fi
}

# Whether the lock names the session this runs in (under the flock: the deploy that took it).
ours() {
  find_session
  case "$(cat "$lock" 2>/dev/null)" in
    *"\"session\": $session, \"session_start\": $session_start}"*) return 0;;
  esac
  return 1
}

# The lease: now, by the host's clock, plus LEASE_S.
write_lease() {
  printf '%s\n' "$(( $(date +%s) + $1 ))" > "$lease.new" && mv -f "$lease.new" "$lease"
}

case $action in
  take)
    lease_s=$1 block_limit=$2 seen=$3 holder=$4 pid=$5 since=$6
    mkdir -p "$root" && (
      flock -w "$wait_s" 9 || exit 75
      if [ -e "$lock" ]; then now="present:$(cat "$lock" 2>/dev/null)"; else now=absent; fi
      if [ "$now" != "$seen" ]; then
        printf '%s\n' @@lock=refused
        { cat "$lock"; } 2>/dev/null | head -c "$block_limit" | base64 -w0; echo
        exit 75
      fi
      find_session
      printf '{"holder": %s, "pid": %s, "since": %s, "session": %s, "session_start": %s}\n' "$holder" "$pid" "$since" \
        "$session" "$session_start" > "$lock.new" && mv -f "$lock.new" "$lock" && write_lease "$lease_s"
    ) 9<"$root" || exit $?
    echo @@lock=taken;;
  renew)
    if [ -d "$root" ]; then
      (
        flock -w "$wait_s" 9 || exit 75
        if ours; then write_lease "$1" && echo @@lease=renewed; else echo @@lease=not-ours; fi
      ) 9<"$root"
    else
      echo @@lease=not-ours
    fi;;
  release)
    if [ -d "$root" ]; then
      (
        flock -w "$wait_s" 9 || exit 75
        if ours; then rm -f "$lock" "$lease"; fi
      ) 9<"$root"
    fi;;
  session)
    expires=$(sed -n '1{/^[0-9]\{1,18\}$/p;}' "$lease" 2>/dev/null)
    if [ -n "$expires" ] && [ "$(date +%s)" -gt "$expires" ]; then
      echo 0
    else
      sp=$(sed -n 's/.*"session": *\([0-9][0-9]*\).*/\1/p' "$lock" | head -n 1)
      [ -n "$sp" ] && field "$sp" 20
    fi;;
  *)
    echo "usage: lock.sh take|renew|release|session ROOT LOCK LEASE WAIT_S [...]" >&2
    exit 2;;
esac

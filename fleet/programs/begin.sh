#!/bin/sh
# A rollout's beginning on its host (fleet/rollout/commands.py begin_command, backup_command), once the deploy lock is taken:
# nothing changes unless everything the plan and its rollback were made from is still what preflight read.
# fleet/rollout/commands.py sends this file, its comments and blank lines left out, as `( set -- ACTION ARGS...; <this
# file> )`; by hand: sh begin.sh ACTION ARGS... (each list one argument, an item a line).
#
#   backup BACKUPS STAMP PRUNE KEEP FILES
#          the FILES that exist copied to BACKUPS/STAMP, modes kept; prints that directory, or nothing where none
#          exists yet; a failed copy fails and leaves no partial set; PRUNE yes: the sets but the last KEEP go
#   begin  BACKUPS STAMP PRUNE KEEP FILES SEEN UNITS LIMIT DIRS MODE STAGED COPIES PENDING RECORD TUNE_FILE TUNE_MARK
#          SECRETS
#          SEEN (`SHA1 PATH`, SHA1 empty: absent) and UNITS (`UNIT INSIDE ENABLED ALIKE...`, ENABLED `-`: no unit
#          file; INSIDE yes: its ActiveState one of ALIKE) checked against what they are now: a difference prints
#          `@@changed=PATH`, or `@@unit-changed=UNIT` with its states as base64 (at most LIMIT bytes), and exits 1.
#          Then the DIRS made (MODE, root's), the STAGED files dropped, each COPIES pair (a line SOURCE, a line
#          PATH) copied to PATH, the backup (where STAMP is not empty), the pending RECORD written to PENDING, the
#          TUNE_MARK to TUNE_FILE (where not empty), each SECRETS path made an empty 0600 file. A failure exits 1
#          with what it did undone. The caller takes the lock before it and releases it on its exit 1.
backup() {
  d="$1/$2"
  mkdir -p "$d" || return 1
  copied=yes
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    if [ -e "$f" ]; then cp -p "$f" "$d/" || { copied=no; break; }; fi
  done <<EOF_FILES
$5
EOF_FILES
  if [ $copied = no ]; then rm -rf "$d"; return 1; fi
  if [ -z "$(ls -A "$d")" ]; then rmdir "$d"; else echo "$d"; fi
  # shellcheck disable=SC2012  # the sets' names are stamps: nothing for ls to mangle
  if [ "$3" = yes ]; then ls -1d "$1"/*/ 2>/dev/null | sort | head -n -"$4" | xargs -r rm -rf; fi
}
write() {
  printf '%s' "$2" > "$1.tmp" && mv -f "$1.tmp" "$1"
}
drop_staged() {
  while IFS= read -r f; do
    [ -z "$f" ] || rm -f "$f"
  done <<EOF_STAGED
$staged
EOF_STAGED
}
fail() {
  [ -z "$taken" ] || rm -rf "$taken"
  drop_staged
  exit 1
}
case "$1" in
backup)
  shift
  backup "$@"
  exit
  ;;
begin) ;;
*)
  echo "usage: begin.sh backup|begin ARGS..." >&2
  exit 2
  ;;
esac
backups=$2 stamp=$3 prune=$4 keep=$5 files=$6 seen=$7 units=$8 limit=$9
shift 9
dirs=$1 mode=$2 staged=$3 copies=$4 pending=$5 record=$6 tune_file=$7 tune_mark=$8 secrets=$9
taken=''
while IFS= read -r line; do
  [ -n "$line" ] || continue
  sha=${line%% *} path=${line#* }
  [ "$(sha1sum "$path" 2>/dev/null | cut -d' ' -f1)" = "$sha" ] || { printf '%s\n' "@@changed=$path"; exit 1; }
done <<EOF_SEEN
$seen
EOF_SEEN
while read -r unit inside enabled alike; do
  [ -n "$unit" ] || continue
  [ "$enabled" = - ] && enabled=''
  a=$(systemctl show -p ActiveState --value -- "$unit" 2>/dev/null)
  e=$(systemctl show -p UnitFileState --value -- "$unit" 2>/dev/null)
  like=no
  for s in $alike; do
    [ "$a" = "$s" ] && like=yes
  done
  if [ $like != "$inside" ] || [ "$e" != "$enabled" ]; then
    printf '%s\n' "@@unit-changed=$unit"
    printf '%s\n%s\n' "$a" "$e" | head -c "$limit" | base64 -w0
    echo
    exit 1
  fi
done <<EOF_UNITS
$units
EOF_UNITS
while IFS= read -r d; do
  [ -z "$d" ] || install -d -m "$mode" -o root -g root "$d" || fail
done <<EOF_DIRS
$dirs
EOF_DIRS
drop_staged
while IFS= read -r source && IFS= read -r path; do
  cp -p "$source" "$path" || fail
done <<EOF_COPIES
$copies
EOF_COPIES
if [ -n "$stamp" ]; then
  ( backup "$backups" "$stamp" "$prune" "$keep" "$files" ) || fail
  taken="$backups/$stamp"  # a set without its pending record would pass for an interrupted rollout's
fi
write "$pending" "$record" || fail
[ -z "$tune_file" ] || write "$tune_file" "$tune_mark" || fail
while IFS= read -r f; do
  # the upload then writes into a file that is 0600 from its first byte
  [ -z "$f" ] || install -m 600 /dev/null "$f" || fail
done <<EOF_SECRETS
$secrets
EOF_SECRETS

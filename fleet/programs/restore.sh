#!/bin/sh
# A rollback's restore of the files (fleet/rollout/commands.py restore_command): the pending record marked as rolling back,
# then every file that differs from before put back (from the backup set; one that did not exist removed), the
# service stopped first where one of its own files comes back or where asked, the staged files dropped, its enabled
# state put back where its unit file exists. Prints `@@restored=` and the paths put back, each between blanks.
# fleet/rollout/commands.py sends this file, its comments and blank lines left out, as `( set -- ARGS...; <this file> )`;
# run under `umask 077` (the pending record is private); by hand:
# umask 077; sh restore.sh PENDING RECORD STOP UNIT UNIT_FILE ENABLED BACKUP FILES SERVICE_FILES STAGED
#
#   PENDING RECORD   the pending record's path and its new content (written atomically)
#   STOP             yes: stop the service even if none of its files comes back
#   UNIT UNIT_FILE   the service and its unit file
#   ENABLED          enabled or disabled: its state put back; anything else: left as it is
#   BACKUP           the backup set's directory, or empty: none
#   FILES            a line per managed file: SHA1 PATH as it was before (SHA1 `-`: it did not exist)
#   SERVICE_FILES    a line per file of the service's own
#   STAGED           a line per staged file, dropped
printf '%s' "$2" > "$1.tmp" && mv -f "$1.tmp" "$1" || exit 1
stop=$3 unit=$4 unit_file=$5 enabled=$6 backup=$7 files=$8 service_files=$9
shift 9
staged=$1
changed=''
while read -r sha path; do
  [ -n "$path" ] || continue
  [ "$sha" = - ] && sha=''
  [ "$(sha1sum "$path" 2>/dev/null | cut -d' ' -f1)" = "$sha" ] || changed="$changed $path "
done <<EOF_FILES
$files
EOF_FILES
while read -r path; do
  case "$changed" in *" $path "*) stop=yes ;; esac
done <<EOF_SERVICE
$service_files
EOF_SERVICE
[ "$stop" = no ] || systemctl stop -- "$unit" 2>/dev/null || true
while read -r sha path; do
  case "$changed" in
  *" $path "*)
    if [ "$sha" = - ]; then
      rm -f "$path"
    elif [ -n "$backup" ]; then
      cp -p "$backup/${path##*/}" "$path.tmp" && mv -f "$path.tmp" "$path"
    else
      printf 'no backup of %s\n' "$path" >&2
      false
    fi || exit 1
    ;;
  esac
done <<EOF_FILES
$files
EOF_FILES
while read -r path; do
  [ -z "$path" ] || rm -f "$path"
done <<EOF_STAGED
$staged
EOF_STAGED
[ -z "$changed" ] || systemctl daemon-reload
case "$enabled" in
enabled) [ ! -e "$unit_file" ] || systemctl enable --quiet -- "$unit" ;;
disabled) [ ! -e "$unit_file" ] || systemctl disable --quiet -- "$unit" ;;
esac
echo "@@restored=$changed"

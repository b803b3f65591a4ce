#!/bin/sh
# The monitoring host's configuration (fleet/monitoring/config.py): each bundle a directory under BUNDLES named by its
# content, made live by an atomic swap of the symlink LIVE (a reader sees the old bundle or the new one).
# fleet/monitoring/host.py sends this file, its comments and blank lines left out, as `( set -- ACTION ARGS...; <this
# file> )`; by hand: sh bundle.sh ACTION ARGS...
#
#   stage   BUNDLES STAGING OWNER DIR...
#           STAGING made afresh and empty, with its DIRs, only OWNER's (0700): a file of it may hold a token
#   install BUNDLES STAGING BUNDLE LIVE KEEP CONFIG ALERTMANAGER_CONFIG
#           STAGING's CONFIG checked by promtool and its ALERTMANAGER_CONFIG by amtool, then live as BUNDLES/BUNDLE;
#           the bundles before it but the last KEEP go. Nothing live changes if a check fails.
set -eu
action=$1 bundles=$2 staging=$3
case "$action" in
stage)
  owner=$4
  shift 4
  rm -rf "$staging"
  install -d -m 0700 -o "$owner" -g "$owner" "$bundles" "$@"
  ;;
install)
  bundle=$4 live=$5 keep=$6
  promtool check config "$staging/$7" >/dev/null
  amtool check-config "$staging/$8" >/dev/null
  rm -rf "${bundles:?}/$bundle"
  mv "$staging" "$bundles/$bundle"
  ln -sfn "$bundles/$bundle" "$live.new"
  mv -T "$live.new" "$live"
  cd "$bundles"
  # shellcheck disable=SC2010,SC2012  # the bundles' names are their content's hex digests: nothing for ls to mangle
  ls -1t | grep -vx "$bundle" | tail -n +"$keep" | xargs -r rm -rf --
  # a bundle written before they were locked down was readable by all
  chmod -R go= "$bundles"
  ;;
*)
  echo "usage: bundle.sh stage|install ARGS..." >&2
  exit 2
  ;;
esac

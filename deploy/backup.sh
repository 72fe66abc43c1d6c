#!/bin/sh
# Back up a Shoal installation: its database first, then the control plane's data folder (the
# artifact store and the server-wide workflows). docs/guides/backup.md says why
# in this order and how to restore (deploy/restore.sh).
#
#   deploy/backup.sh DEST_DIR
#
# Reads SHOAL_DATABASE_URL and SHOAL_DATA_DIR (default /data), as the control plane has them.
# PostgreSQL (postgresql://USER:PASSWORD@HOST:PORT/DB; a "+asyncpg" driver suffix is dropped):
#   DEST_DIR/shoal-STAMP.dump           pg_dump's custom format (pg_restore reads it)
#   DEST_DIR/shoal-STAMP.files.tar.gz   the data folder, but the store's scratch space
# The embedded database (SQLite: SHOAL_DATABASE_URL unset or sqlite://): `shoal backup`, which
# must be on PATH, writes
#   DEST_DIR/shoal-STAMP.db             a snapshot by SQLite's online backup API
#   DEST_DIR/shoal-STAMP.files.tar.gz   the same, without the live database
# Each is complete or absent (written under .part names, then renamed); both names are
# printed. The control plane may keep running meanwhile. PostgreSQL's needs pg_dump (of the
# server's major version or newer), GNU tar and gzip.
set -eu

die() { echo "backup.sh: $*" >&2; exit 2; }

dest=${1:-}
[ -n "$dest" ] || die "usage: backup.sh DEST_DIR"
data=${SHOAL_DATA_DIR:-/data}
stamp=${SHOAL_BACKUP_STAMP:-$(date -u +%Y%m%dT%H%M%SZ)}
url=$(printf '%s\n' "${SHOAL_DATABASE_URL:-}" \
      | sed -e 's|^postgresql+asyncpg://|postgresql://|' -e 's|^postgres://|postgresql://|')
case $url in
  postgresql://*) ;;
  ""|sqlite:*|sqlite+*)
    command -v shoal >/dev/null 2>&1 \
      || die "the embedded database is backed up by \`shoal backup\`: run this where Shoal is installed"
    export SHOAL_DATA_DIR="$data"
    exec shoal backup --stamp "$stamp" "$dest" ;;
  *) die "SHOAL_DATABASE_URL must be the control plane's postgresql:// URL, or unset (SQLite)" ;;
esac
[ -d "$data" ] || die "no data folder at $data (set SHOAL_DATA_DIR to the control plane's)"
mkdir -p "$dest"
dump=$dest/shoal-$stamp.dump
files=$dest/shoal-$stamp.files.tar.gz

# 1. The database, as one consistent snapshot. A file is stored (and synced) before the row
#    naming it is committed, so every file this snapshot names is in the folder by now.
pg_dump --format=custom --file="$dump.part" "$url"
mv "$dump.part" "$dump"

# 2. The files. Stored objects are never rewritten (a file is named by its SHA-256 and renamed
#    into place whole), but storing the same bytes again touches its time, and the sweeper may
#    remove an object no row names any more: tar's "changed/removed as we read it" (exit 1) is
#    expected then, and harmless; exit 2 is a real failure.
status=0
tar -C "$data" --exclude=./artifacts/tmp --warning=no-file-changed \
    --warning=no-file-removed -czf "$files.part" . || status=$?
[ "$status" -le 1 ] || { rm -f "$files.part"; die "tar failed (exit $status)"; }
mv "$files.part" "$files"

echo "$dump"
echo "$files"

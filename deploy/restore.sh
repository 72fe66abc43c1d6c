#!/bin/sh
# Restore a backup made by deploy/backup.sh: the database first, then the data folder, then a
# check that every file the database names is there with its content (docs/guides/backup.md).
#
#   deploy/restore.sh [--replace] DUMP FILES_ARCHIVE
#
# Stop every control-plane copy first. Reads SHOAL_DATABASE_URL and SHOAL_DATA_DIR as
# backup.sh does; the database is created by the URL's user (it needs CREATEDB), connected to
# the server's `postgres` database. Without --replace it refuses a database that exists and a
# data folder that holds anything; with --replace it drops that database (disconnecting its
# sessions) and empties that folder first. Exits 0 only when every file checks out.
# Needs psql, pg_restore, GNU tar, gzip and sha256sum. The embedded database (SQLite:
# SHOAL_DATABASE_URL unset or sqlite://, DUMP a shoal-STAMP.db): `shoal restore` does the same,
# and checks the database with PRAGMA integrity_check too.
set -eu

die() { echo "restore.sh: $*" >&2; exit 2; }

replace=0
if [ "${1:-}" = --replace ]; then replace=1; shift; fi
[ $# -eq 2 ] || die "usage: restore.sh [--replace] DUMP FILES_ARCHIVE"
dump=$1
files=$2
[ -f "$dump" ] || die "no dump at $dump"
[ -f "$files" ] || die "no files archive at $files"
data=${SHOAL_DATA_DIR:-/data}
url=$(printf '%s\n' "${SHOAL_DATABASE_URL:-}" \
      | sed -e 's|^postgresql+asyncpg://|postgresql://|' -e 's|^postgres://|postgresql://|')
case $url in
  postgresql://*/*) ;;
  ""|sqlite:*|sqlite+*)
    command -v shoal >/dev/null 2>&1 \
      || die "the embedded database is restored by \`shoal restore\`: run this where Shoal is installed"
    if [ "$replace" = 1 ]; then set -- --replace "$dump" "$files"; else set -- "$dump" "$files"; fi
    export SHOAL_DATA_DIR="$data"
    exec shoal restore "$@" ;;
  *) die "SHOAL_DATABASE_URL must be the control plane's postgresql://…/DATABASE URL, or unset (SQLite)" ;;
esac
base=${url%%\?*}           # without ?options
query=${url#"$base"}       # ?options, or nothing
db=${base##*/}
maintenance=${base%/*}/postgres$query
[ -n "$db" ] || die "SHOAL_DATABASE_URL names no database"

sql() {  # psql on the maintenance database, with :"db" and :'db' bound to the database name
  psql "$maintenance" -X -q -At -v ON_ERROR_STOP=1 -v db="$db"
}

# Nothing is changed unless both targets may be.
exists=$(echo "SELECT 1 FROM pg_database WHERE datname = :'db';" | sql)
if [ -n "$exists" ] && [ "$replace" = 0 ]; then
  die "database $db exists: restore onto a new one, or pass --replace to drop it"
fi
mkdir -p "$data"
if [ -n "$(find "$data" -mindepth 1 -maxdepth 1 | head -n 1)" ] && [ "$replace" = 0 ]; then
  die "$data is not empty: restore into an empty folder, or pass --replace to empty it"
fi

# 1. The database.
if [ -n "$exists" ]; then
  echo 'DROP DATABASE :"db" WITH (FORCE);' | sql
fi
echo 'CREATE DATABASE :"db";' | sql
pg_restore --exit-on-error --no-owner --no-privileges --dbname="$url" "$dump"

# 2. The files.
find "$data" -mindepth 1 -delete
tar -C "$data" -xzf "$files"

# 3. Every file a row names (a task's file, an upload and its extracted text) is in the store,
#    with the content its name (its SHA-256) says.
objects=$data/artifacts/objects
list=$(mktemp)
trap 'rm -f "$list"' EXIT
psql "$url" -X -q -At -v ON_ERROR_STOP=1 >"$list" <<'SQL'
SELECT sha256 || '  ' || substr(sha256, 1, 2) || '/' || substr(sha256, 3)
FROM (SELECT sha256 FROM artifacts
      UNION SELECT sha256 FROM uploads
      UNION SELECT text_sha256 FROM uploads WHERE text_sha256 IS NOT NULL) AS named
ORDER BY 1;
SQL
count=$(wc -l <"$list" | tr -d ' ')
if [ "$count" -gt 0 ]; then
  [ -d "$objects" ] || die "the archive holds no artifact store, but the database names $count files"
  (cd "$objects" && sha256sum --check --quiet --strict "$list" >&2) \
    || die "some files the database names are missing or damaged (listed above)"
fi
tasks=$(psql "$url" -X -q -At -c 'SELECT count(*) FROM tasks')
echo "restore.sh: database $db restored (tasks: $tasks); $count stored files present and intact in $data"

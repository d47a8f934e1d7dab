#!/bin/sh
# The test's stand-in for the postgres image's entrypoint (tests/ops/test_podman.py): on an empty PGDATA, initdb
# with POSTGRES_USER and POSTGRES_PASSWORD (scram-sha-256 over TCP) and create POSTGRES_DB; then run the server as
# the postgres user on POSTGRES_LISTEN (default *), port 5432, its socket in /var/run/postgresql (pg_isready's).
set -eu
PGDATA=${PGDATA:-/var/lib/postgresql/data}
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    as_postgres "$BIN/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile \
        --auth-local=trust --auth-host=scram-sha-256 > /dev/null
    rm -f /tmp/pwfile
    echo "CREATE DATABASE \"$POSTGRES_DB\";" | as_postgres "$BIN/postgres" --single -D "$PGDATA" postgres > /dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups -- "$BIN/postgres" -D "$PGDATA" \
    -c "listen_addresses=${POSTGRES_LISTEN:-*}" -p 5432 -k /var/run/postgresql

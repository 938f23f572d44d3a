#!/bin/bash
# docker-entrypoint.sh of the locally built PostgreSQL image (Debian's postgresql-15).
#
# Charts written for the public `postgres` image start it as `docker-entrypoint.sh postgres ...` and
# configure it with its environment; this script keeps that contract so such a chart runs unchanged:
#   PGDATA                     the data directory (made, owned by postgres, mode 0700)
#   POSTGRES_USER              the superuser initdb creates (default postgres)
#   POSTGRES_PASSWORD          its password; required unless POSTGRES_HOST_AUTH_METHOD=trust
#   POSTGRES_DB                a database created at initialisation (default: the user's name)
#   POSTGRES_INITDB_ARGS       more initdb arguments
#   /docker-entrypoint-initdb.d/*.sql, *.sql.gz, *.sh   run once, after initdb, on a local socket
# Started as root it prepares the directories and runs as postgres (uid 999, as the public image).
set -Eeo pipefail

log() { echo "entrypoint: $*" >&2; }

if [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi

if [ "$1" != 'postgres' ]; then
	exec "$@"
fi

: "${PGDATA:?PGDATA must name the data directory}"
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"

if [ "$(id -u)" = '0' ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 0700 "$PGDATA"
	chmod 2775 /var/run/postgresql
	exec gosu postgres "$BASH_SOURCE" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != 'trust' ]; then
		log "the database is not initialised and POSTGRES_PASSWORD is empty: set it, or POSTGRES_HOST_AUTH_METHOD=trust"
		exit 1
	fi
	log "initialising $PGDATA for superuser $POSTGRES_USER"
	pwfile=()
	if [ -n "${POSTGRES_PASSWORD:-}" ]; then
		printf '%s\n' "$POSTGRES_PASSWORD" >/tmp/pwfile
		pwfile=(--pwfile=/tmp/pwfile)
	fi
	# shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS holds several arguments
	initdb --username="$POSTGRES_USER" "${pwfile[@]}" -D "$PGDATA" ${POSTGRES_INITDB_ARGS:-}
	rm -f /tmp/pwfile
	if [ -n "${POSTGRES_HOST_AUTH_METHOD:-}" ]; then
		printf 'host all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
	else
		printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
	fi

	# Initialisation on a socket only: nobody connects before it is done.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" -w start
	psql=(psql -v ON_ERROR_STOP=1 --no-password --no-psqlrc -h /var/run/postgresql -U "$POSTGRES_USER")
	if [ "$POSTGRES_DB" != 'postgres' ]; then
		"${psql[@]}" -d postgres --set db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db";
		SQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
			*.sh) log "running $f"; . "$f" ;;
			*.sql) log "running $f"; "${psql[@]}" -d "$POSTGRES_DB" -f "$f" ;;
			*.sql.gz) log "running $f"; gunzip -c "$f" | "${psql[@]}" -d "$POSTGRES_DB" ;;
			*) [ -e "$f" ] && log "ignoring $f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	log "initialised; starting PostgreSQL"
fi

exec "$@"

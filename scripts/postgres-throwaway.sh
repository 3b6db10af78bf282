#!/usr/bin/env bash
# A throwaway PostgreSQL cluster in a directory, on a free port of 127.0.0.1, trust auth,
# superuser `postgres`; fsync and synchronous_commit stay on (the defaults).
#
#   scripts/postgres-throwaway.sh start DIR   # prints PORT, then the URL of database postgres
#   scripts/postgres-throwaway.sh stop DIR    # stops the server (fast) and removes DIR
#
# DIR must not exist or be empty. As root (CI), initdb and pg_ctl refuse to run: they run as
# the `postgres` user through runuser, and DIR is made theirs. Debian's binaries:
# apt-get install postgresql. Server log: DIR/postgres.log.
set -euo pipefail

usage() {
    echo "usage: $0 start DIR | stop DIR" >&2
    exit 2
}

[ $# -eq 2 ] || usage
command=$1
dir=$2

bindir=""
for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -n -r); do
    if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ] && [ -x "$candidate/postgres" ]; then
        bindir=$candidate
        break
    fi
done
if [ -z "$bindir" ]; then
    echo "$0: no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: apt-get install postgresql" >&2
    exit 1
fi

# as_postgres CMD…: runs CMD as the postgres user when we are root, as ourselves otherwise.
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then
        (cd "$dir" && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null && return
    # No python3: a random high port, checked against the listening sockets.
    local port
    while :; do
        port=$((20000 + RANDOM % 40000))
        ss -Htln "sport = :$port" 2>/dev/null | grep -q . || { echo "$port"; return; }
    done
}

case "$command" in
start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ -n "$(ls -A "$dir")" ]; then
        echo "$0: $dir is not empty" >&2
        exit 1
    fi
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || {
            echo "$0: running as root needs the postgres user: apt-get install postgresql" >&2
            exit 1
        }
        chown postgres: "$dir"
        chmod 0755 "$dir"
        # Every parent must be traversable by postgres.
        parent=$(dirname "$dir")
        while [ "$parent" != / ]; do
            if ! runuser -u postgres -- test -x "$parent"; then
                echo "$0: postgres cannot traverse $parent: chmod o+x it or use another DIR" >&2
                exit 1
            fi
            parent=$(dirname "$parent")
        done
    fi
    as_postgres "$bindir/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        exit 1
    }
    for attempt in 1 2 3 4 5; do
        port=$(free_port)
        rm -f "$dir/postgres.log"
        if as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
            -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null 2>"$dir/pg_ctl.err"; then
            echo "$port" >"$dir/port"
            echo "$port"
            echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
            exit 0
        fi
        # Another process took the port between the check and the bind: try another.
        grep -q "Address already in use" "$dir/postgres.log" 2>/dev/null || break
        echo "$0: port $port taken, retrying ($attempt)" >&2
    done
    cat "$dir/pg_ctl.err" >&2
    tail -n 20 "$dir/postgres.log" >&2 2>/dev/null || true
    exit 1
    ;;
stop)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_postgres "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || echo "$0: pg_ctl stop failed; removing $dir anyway" >&2
    fi
    rm -rf "$dir"
    ;;
*)
    usage
    ;;
esac

#!/usr/bin/env bash
# Two configurations (or two builds) of the PostgreSQL scale-out, interleaved on one throwaway
# cluster: pair A and pair B, two `coffer serve --database URL` instances each (all four
# share the data directory and the ledger), the phases alternating A, B, A, B … with fresh
# receipts, so that a change is judged against the same disk and the same neighbours rather
# than against another run (whole runs of load-postgres.sh differ by more than most changes).
#
#   Benchmarks/ab-postgres.sh
#   A_ARGS="" B_ARGS="--event-loops 1" ROUNDS=4 Benchmarks/ab-postgres.sh
#   A_BIN=/tmp/coffer-before B_BIN=.build-release/release/coffer Benchmarks/ab-postgres.sh
#   B_ENV="SOME_VARIABLE=1" MODE=sat Benchmarks/ab-postgres.sh
#
# A_ARGS / B_ARGS: extra `serve` flags of each pair; A_ENV / B_ENV: environment assignments of
# each pair (space-separated NAME=VALUE); A_BIN / B_BIN: the binary of each pair (default: this
# checkout's release build). MODE=paced (default: RATE redemptions/s in total, 2,050) or sat.
# Prints one line per phase: pair, rate, PostgreSQL transactions per redemption
# (pg_stat_database: two per batch), p50/p90/p99 of both wrk processes merged, the paced p99
# corrected for coordinated omission, CPU seconds per 1,000 redemptions of the pair's two
# processes and of the PostgreSQL server, statuses, the disk probe. Needs wrk and Debian's
# postgresql.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/load-common.sh
S=${SECONDS_EACH:-10}
C=${CONNECTIONS:-32}
T=1
RATE=${RATE:-2050}
ROUNDS=${ROUNDS:-3}
MODE=${MODE:-paced}
PORT=${PORT:-18590}
OUT=.build-release/ab-postgres
half=$((C / 2))
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }
case "$MODE" in paced | sat) ;; *) echo "MODE must be paced or sat" >&2; exit 2 ;; esac

build_coffer
A_BIN=${A_BIN:-$BIN}
B_BIN=${B_BIN:-$BIN}
scripts/postgres-throwaway.sh stop "$OUT/cluster" 2>/dev/null || true
rm -rf "$OUT" && mkdir -p "$OUT/shared"
SERVERS=()
cleanup() {
    for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    scripts/postgres-throwaway.sh stop "$OUT/cluster" 2>/dev/null || true
}
trap cleanup EXIT
{
    read -r _
    read -r URL
} < <(scripts/postgres-throwaway.sh start "$OUT/cluster")
# WAL segments to reuse, as a server in service has (load-postgres.sh, WARM_WAL).
warm_wal "$URL" "${WARM_WAL:-40}"
"$A_BIN" migrate --database "$URL" >/dev/null

# serve NAME PORT BIN ENV ARGS: an instance of a pair in the background, its pid appended to SERVERS.
serve() {
    local name=$1 port=$2 bin=$3 env=$4 args=$5
    ports_free "$port"
    # shellcheck disable=SC2086 # ENV and ARGS are word lists
    env $env "$bin" serve --demo --port "$port" --content content --rate-redemptions 0 --log-level warning \
        --data-dir "$OUT/shared" --database "$URL" $args >"$OUT/$name.log" 2>&1 &
    SERVERS+=($!)
    wait_healthy "$port" $! || { cat "$OUT/$name.log" >&2; exit 1; }
}
serve a1 $((PORT + 1)) "$A_BIN" "${A_ENV:-}" "${A_ARGS:-}"
serve a2 $((PORT + 2)) "$A_BIN" "${A_ENV:-}" "${A_ARGS:-}"
serve b1 $((PORT + 3)) "$B_BIN" "${B_ENV:-}" "${B_ARGS:-}"
serve b2 $((PORT + 4)) "$B_BIN" "${B_ENV:-}" "${B_ARGS:-}"
pids_a="${SERVERS[0]} ${SERVERS[1]}"
pids_b="${SERVERS[2]} ${SERVERS[3]}"
rate=$RATE
[ "$MODE" = sat ] && rate=0
per_phase=$([ "$MODE" = sat ] && echo 4500 || echo $((RATE + 100)))
mint_bodies "$OUT/shared/sandbox" $((ROUNDS * 2 * S * per_phase + 10000)) "$OUT" 2

commits() { psql "$URL" -qAtX -c "SELECT sum(xact_commit) FROM pg_stat_database"; }
per_1000() { awk -v used="$1" -v n="$2" -v s="$S" 'BEGIN{printf "%.3f", used / (n * s) * 1000}'; }

start=1
for round in $(seq 1 "$ROUNDS"); do
    for pair in A B; do
        if [ "$pair" = A ]; then first=$((PORT + 1)) pids=$pids_a; else first=$((PORT + 3)) pids=$pids_b; fi
        # shellcheck disable=SC2086 # pids is a word list
        coffer_before=$(ticks $pids)
        pg_before=$(ticks $(postgres_pids "$OUT/cluster"))
        x0=$(commits)
        disk_probe "$S" "$OUT" >"$OUT/disk.txt" &
        probe=$!
        run_wrk "$OUT/$pair-a.txt" "$first" "$OUT/bodies-1.ndjson" "$start" 0 $((rate / 2)) "$half" &
        a=$!
        run_wrk "$OUT/$pair-b.txt" $((first + 1)) "$OUT/bodies-2.ndjson" "$start" 0 $((rate / 2)) "$half"
        wait "$a"
        wait "$probe" || echo "disk probe failed" >"$OUT/disk.txt"
        x1=$(commits)
        # shellcheck disable=SC2086
        coffer_used=$(spent "$coffer_before" "$(ticks $pids)")
        pg_used=$(spent "$pg_before" "$(ticks $(postgres_pids "$OUT/cluster"))")
        n=$(($(field rate "$OUT/$pair-a.txt") + $(field rate "$OUT/$pair-b.txt")))
        qa=$(field requests "$OUT/$pair-a.txt")
        qb=$(field requests "$OUT/$pair-b.txt")
        start=$((start + (qa > qb ? qa : qb) + half + 1))
        co=""
        if [ "$rate" -gt 0 ]; then
            co=" corrected p99_ms: $(percentiles <(corrected $((half * 1000000 / (rate / 2))) "$OUT/$pair-a.txt.hist" "$OUT/$pair-b.txt.hist") | awk '{print $6}')"
        fi
        printf 'round %d %s %5d/s  %.2f tx/redemption  %s%s  CPU per 1,000: coffer %s s, postgres %s s  statuses %s  %s\n' \
            "$round" "$pair" "$n" "$(awk -v a="$x0" -v b="$x1" -v n="$n" -v s="$S" 'BEGIN{print (b - a) / (n * s)}')" \
            "$(percentiles "$OUT/$pair-a.txt.hist" "$OUT/$pair-b.txt.hist")" "$co" \
            "$(per_1000 "$coffer_used" "$n")" "$(per_1000 "$pg_used" "$n")" \
            "$(grep -h '^statuses' "$OUT/$pair-a.txt" "$OUT/$pair-b.txt" | cut -d' ' -f2- | tr '\n' ' ')" "$(cat "$OUT/disk.txt")"
    done
done

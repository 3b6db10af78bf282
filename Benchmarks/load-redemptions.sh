#!/usr/bin/env bash
# End-to-end redemption load: the release `coffer serve` (durable ledger, synchronous=FULL)
# against wrk posting unique sandbox receipts, in three phases:
#   paced   — wrk holds the offered load at RATE redemptions/s (default 2,050: the pacing is
#             within ~1.5%, the goal is 2,000 achieved): the latency a client sees when the
#             server carries that load;
#   redeem  — as fast as CONNECTIONS connections go (saturation: throughput, and the latency
#             of a full queue);
#   replay  — the receipts of the paced phase again: every request is a replay (409), each
#             one written to the ledger (--rate-recorded-refusals 0: the budget off).
#
#   Benchmarks/load-redemptions.sh                 # 10 s per phase, 32 connections
#   SECONDS_EACH=20 CONNECTIONS=64 RATE=2500 Benchmarks/load-redemptions.sh
#
# Needs wrk (apt-get install wrk). Builds coffer in release into .build-release/.
# Prints rate, latency percentiles and status counts of each phase, and the server's CPU
# seconds per 1,000 requests.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/load-common.sh
S=${SECONDS_EACH:-10}
C=${CONNECTIONS:-32}
T=${THREADS:-1}
# Enough fresh receipts for the paced and the saturated phase (~5,000/s here) at 10 s each.
N=${RECEIPTS:-$((S * 8000))}
RATE=${RATE:-2050}
PORT=${PORT:-18480}
OUT=.build-release/load
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }

build_coffer
rm -rf "$OUT" && mkdir -p "$OUT"
ports_free "$PORT"
"$BIN" serve --demo --data-dir "$OUT/data" --port "$PORT" --content content --rate-redemptions 0 --rate-recorded-refusals 0 --log-level warning >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
wait_healthy "$PORT" "$SERVER"
mint_bodies "$OUT/data/sandbox" "$N" "$OUT" 1

cpu() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
tick=$(getconf CLK_TCK)
phase() {
    local name=$1 start=$2 count=$3 rate=$4
    local before after
    before=$(cpu)
    run_wrk "$OUT/$name.txt" "$PORT" "$OUT/bodies-1.ndjson" "$start" "$count" "$rate" "$C"
    after=$(cpu)
    local r
    r=$(field rate "$OUT/$name.txt")
    printf '%-8s %s/s  %s  %s  server CPU %.2f s per 1,000\n' "$name" "$r" "$(grep '^p50' "$OUT/$name.txt")" \
        "$(grep '^statuses' "$OUT/$name.txt")" "$(awk -v a="$before" -v b="$after" -v t="$tick" -v r="$r" -v s="$S" 'BEGIN{print (b-a)/t/(r*s)*1000}')"
}
echo "phase    rate       latency                                            statuses" >&2
phase paced 1 0 "$RATE"
paced=$(field requests "$OUT/paced.txt")
# Fresh receipts for the saturation phase start after the paced ones (plus the requests
# still in flight when wrk stopped).
phase redeem $((paced + C + 1)) 0 0
phase replay 1 "$paced" 0
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^coffer_redemptions_total' || true
"$BIN" ledger verify --data-dir "$OUT/data" | head -2 || true

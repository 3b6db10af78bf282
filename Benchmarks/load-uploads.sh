#!/usr/bin/env bash
# Redemptions while an admin uploads large assets: the release `coffer serve --demo` (local
# content store, durable SQLite ledger) takes paced redemptions in two phases of SECONDS_EACH:
#   quiet    — nothing else runs;
#   uploads  — UPLOADERS loops each PUT a UPLOAD_MB file (random bytes, the same for all:
#              one object, written to a new file, fsynced and renamed each time) to an
#              asset of its own, again and again, while the redemptions run.
# An upload's write, hash and fsync must not hold the threads requests run on (Swift's
# cooperative pool: one per core); the uploads still take CPU and disk, so the second phase
# is slower in any case. Compare binaries with COFFER_BIN (alternate them: ABBA).
#
#   Benchmarks/load-uploads.sh
#   RATE=1500 UPLOADERS=4 UPLOAD_MB=128 Benchmarks/load-uploads.sh
#
# Needs wrk and curl. Prints each phase's rate, latency percentiles and maximum, the
# redemptions that took over 100 ms, and the uploads finished.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/load-common.sh
S=${SECONDS_EACH:-15}
C=${CONNECTIONS:-16}
T=${THREADS:-1}
RATE=${RATE:-1000}
UPLOADERS=${UPLOADERS:-2}
MB=${UPLOAD_MB:-256}
N=${RECEIPTS:-$((S * RATE * 3 + 4 * C + 1000))}
PORT=${PORT:-18490}
OUT=.build-release/load-uploads
for tool in wrk curl; do command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 2; }; done

build_coffer
rm -rf "$OUT" && mkdir -p "$OUT"
head -c $((MB << 20)) /dev/urandom >"$OUT/asset.bin"
ports_free "$PORT"
"$BIN" serve --demo --data-dir "$OUT/data" --port "$PORT" --content content --rate-redemptions 0 \
    --upload-limit $(((MB + 1) << 20)) --log-level warning >"$OUT/serve.log" 2>&1 &
SERVER=$!
UPLOADING=()
cleanup() {
    for p in "${UPLOADING[@]}"; do kill "$p" 2>/dev/null || true; done
    kill "$SERVER" 2>/dev/null || true
}
trap cleanup EXIT
wait_healthy "$PORT" "$SERVER"
ADMIN=$(awk '/admin key:/{print $3}' "$OUT/serve.log")
[ -n "$ADMIN" ] || { echo "no admin key in $OUT/serve.log" >&2; exit 1; }
mint_bodies "$OUT/data/sandbox" "$N" "$OUT" 1

# upload_loop K STOP_FILE: PUTs the file to asset bench-upload-K until STOP_FILE exists;
# writes how many finished (201) and failed to $OUT/uploads-K.
upload_loop() {
    local k=$1 stop=$2 done=0 failed=0
    while [ ! -e "$stop" ]; do
        if curl -sf -o /dev/null -T "$OUT/asset.bin" -H "Authorization: Bearer $ADMIN" \
            -H 'Content-Type: application/octet-stream' "http://127.0.0.1:$PORT/v1/admin/assets/bench-upload-$k"; then
            done=$((done + 1))
        else
            failed=$((failed + 1))
        fi
    done
    echo "$done $failed" >"$OUT/uploads-$k"
}

# phase NAME START: paced redemptions of bodies START…; prints one line.
phase() {
    local name=$1 start=$2
    run_wrk "$OUT/$name.txt" "$PORT" "$OUT/bodies-1.ndjson" "$start" 0 "$RATE" "$C"
    local slow
    slow=$(awk '$1 > 100000 {n += $2} END {print n + 0}' "$OUT/$name.txt.hist")
    printf '%-8s %s/s  %s  over 100 ms: %s  %s\n' "$name" "$(field rate "$OUT/$name.txt")" \
        "$(grep '^p50' "$OUT/$name.txt")" "$slow" "$(grep '^statuses' "$OUT/$name.txt")"
}

phase quiet 1
quiet=$(field requests "$OUT/quiet.txt")
rm -f "$OUT/stop"
for k in $(seq 1 "$UPLOADERS"); do
    upload_loop "$k" "$OUT/stop" &
    UPLOADING+=($!)
done
phase uploads $((quiet + C + 1))
touch "$OUT/stop"
for p in "${UPLOADING[@]}"; do wait "$p"; done
UPLOADING=()
awk -v mb="$MB" -v s="$S" '{d += $1; f += $2} END {printf "uploads  %d of %d MB finished (%.0f MB/s while the phase and the last ones ran), %d failed\n", d, mb, d * mb / s, f}' "$OUT"/uploads-*
p99() { field p99_ms "$OUT/$1.txt"; }
awk -v q="$(p99 quiet)" -v u="$(p99 uploads)" 'BEGIN {printf "ratio    p99 with uploads / p99 quiet = %.2f×\n", u / q}'
"$BIN" ledger verify --data-dir "$OUT/data" | head -1 || true

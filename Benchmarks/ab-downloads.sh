#!/usr/bin/env bash
# Two coffer builds, interleaved, on the same 1 MB stream download: server CPU per request and
# requests/s, so a change to the download path is judged against run-to-run noise (on this
# shared 2-core machine one run can be 40% off; the interleaved spread is about ±8%).
#
#   Benchmarks/ab-downloads.sh OLD_CHECKOUT NEW_CHECKOUT [ROUNDS] [SECONDS]
#
# Each checkout needs a release build (swift build -c release --product coffer
# --scratch-path .build-release) and its own content/ (an older demo catalogue may not load in
# a newer build). Needs wrk and curl. Prints one line a run: checkout, req/s, CPU ms a request.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,10p' "$0"; exit 2; }
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
ROUNDS=${3:-3}
S=${4:-8}
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }

run() { # checkout
    local root=$1 bin=$1/.build-release/release/coffer out port pid admin r url t0 t1 result
    [ -x "$bin" ] || { echo "no release build in $root" >&2; exit 2; }
    out=$(mktemp -d)
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    (cd "$root" && exec "$bin" serve --demo --data-dir "$out/data" --port "$port" --content content --rate-redemptions 0 --log-level warning) \
        >"$out/coffer.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
    admin=$(awk '/admin key:/{print $3}' "$out/coffer.log")
    head -c $((1 << 20)) /dev/urandom >"$out/1mb.bin"
    curl -sf -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/octet-stream' --data-binary "@$out/1mb.bin" \
        "http://127.0.0.1:$port/v1/admin/assets/bench-1mb" >/dev/null
    curl -sf -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
        -d '{"bundleId":"com.coffer.demo","type":"nonConsumable","assetIds":["bench-1mb"],"title":"bench"}' \
        "http://127.0.0.1:$port/v1/admin/products/com.coffer.demo.bench" >/dev/null
    r=$("$bin" sandbox receipt --dir "$out/data/sandbox" --bundle-id com.coffer.demo --purchase com.coffer.demo.bench:7000001 --base64)
    url=$(curl -sf -X POST -H 'Content-Type: application/json' -d "{\"receipt\":\"$r\"}" "http://127.0.0.1:$port/v1/redemptions" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["assets"][0]["url"])')
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    result=$(wrk -t2 -c16 -d"${S}s" "http://127.0.0.1:$port$url" 2>&1)
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$out"
    python3 - "$root" "$t0" "$t1" "$result" <<'PY'
import re, sys
root, t0, t1, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
total = int(re.search(r"(\d+) requests in", out).group(1))
rate = float(re.search(r"Requests/sec:\s*([\d.]+)", out).group(1))
print(f"{root:40} {rate:9.1f} req/s  {(t1 - t0) * 10 / total:.3f} ms CPU a request")
PY
}

for _ in $(seq 1 "$ROUNDS"); do
    run "$OLD"
    run "$NEW"
done

#!/usr/bin/env bash
# Downloads with the content in an S3-compatible bucket, ratios measured in one run:
#   redirect — a Coffer in `--download-mode redirect` answering 302s to presigned URLs, against
#              GET /healthz on the same server (goal ≥ 0.5×): what the token check, the catalogue
#              lookup and the presigning cost next to the cheapest request there is;
#   stream   — 1 MB downloads streamed by Coffer from the bucket, against the same 1 MB streamed
#              by a Coffer from its local directory (goal ≥ 0.5×): with the instance's cache
#              (the default, --content-cache-size 1 GiB: the object was downloaded once before
#              the measurement, so it is served from DATA/cache), and with the cache off
#              (--content-cache-size 0: every download is a GET to the bucket).
# The bucket is moto's standalone server (scripts/moto-server.py, authentication on — every
# request Coffer sends is signed and checked), a Python server: its own rate for 1 MB objects
# is measured too (the same GET signed by botocore, one client), so a miss can be told apart
# from Coffer's overhead.
#
#   Benchmarks/load-objectstore.sh            # 10 s per measurement, 16 connections
#   SECONDS_EACH=20 CONNECTIONS=32 Benchmarks/load-objectstore.sh
#
# Needs wrk (apt-get install wrk) and moto in .build-venv (.ci/run installs it). Builds coffer in
# release into .build-release/.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/load-common.sh
S=${SECONDS_EACH:-10}
C=${CONNECTIONS:-16}
PORT=${PORT:-18520}
OUT=$PWD/.build-release/objectstore
PY=${COFFER_TEST_MOTO_PYTHON:-$PWD/.build-venv/bin/python3}
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }
[ -x "$PY" ] && [ -x "$(dirname "$PY")/moto_server" ] || { echo "moto is required: python3 -m venv .build-venv && .build-venv/bin/pip install 'moto[server]'" >&2; exit 2; }

build_coffer
rm -rf "$OUT" && mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

"$PY" scripts/moto-server.py "$OUT/moto.json" $$ &
PIDS+=($!)
for _ in $(seq 1 300); do [ -f "$OUT/moto.json" ] && break; sleep 0.1; done
[ -f "$OUT/moto.json" ] || { echo "moto did not start" >&2; exit 1; }
json() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$OUT/moto.json" "$1"; }
ENDPOINT=$(json endpoint)
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
AWS_ACCESS_KEY_ID=$(json accessKeyId)
AWS_SECRET_ACCESS_KEY=$(json secretAccessKey)
"$PY" - "$ENDPOINT" <<'PY'
import boto3, os, sys
boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1").create_bucket(Bucket="coffer-bench")
PY

head -c $((1 << 20)) /dev/urandom >"$OUT/1mb.bin"
# start NAME PORT ARGS…: a `coffer serve --demo` with the 1 MB asset uploaded and redeemed;
# sets URL_<NAME> to its download URL and PID_<NAME>.
start() {
    local name=$1 port=$2
    shift 2
    ports_free "$port"
    "$BIN" serve --demo --data-dir "$OUT/data-$name" --port "$port" --content content --rate-redemptions 0 --downloads-per-address 0 \
        --log-level warning "$@" >"$OUT/$name.log" 2>&1 &
    PIDS+=($!)
    printf -v "PID_$name" '%s' $!
    wait_healthy "$port" $!
    local admin receipt
    admin=$(awk '/admin key:/{print $3}' "$OUT/$name.log")
    curl -sf -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/octet-stream' --data-binary "@$OUT/1mb.bin" \
        "http://127.0.0.1:$port/v1/admin/assets/bench-1mb" >/dev/null
    curl -sf -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
        -d '{"bundleId":"com.coffer.demo","type":"nonConsumable","assetIds":["bench-1mb"],"title":"bench"}' \
        "http://127.0.0.1:$port/v1/admin/products/com.coffer.demo.bench" >/dev/null
    receipt=$("$BIN" sandbox receipt --dir "$OUT/data-$name/sandbox" --bundle-id com.coffer.demo --purchase com.coffer.demo.bench:7100001 --base64)
    curl -sf -X POST -H 'Content-Type: application/json' -d "{\"receipt\":\"$receipt\"}" "http://127.0.0.1:$port/v1/redemptions" >"$OUT/$name.json"
    printf -v "URL_$name" '%s' "$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['assets'][0]['url'])" "$OUT/$name.json")"
}
start local "$PORT"
start s3 $((PORT + 1)) --content-store s3://coffer-bench/s3 --s3-endpoint "$ENDPOINT"
start s3direct $((PORT + 3)) --content-store s3://coffer-bench/s3 --s3-endpoint "$ENDPOINT" --content-cache-size 0
start redirect $((PORT + 2)) --content-store s3://coffer-bench/redirect --s3-endpoint "$ENDPOINT" --download-mode redirect
# shellcheck disable=SC2154
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((PORT + 2))$URL_redirect")" = 302 ] || { echo "redirect mode did not answer 302" >&2; exit 1; }
# shellcheck disable=SC2154
curl -sf "http://127.0.0.1:$((PORT + 1))$URL_s3" | cmp - "$OUT/1mb.bin" || { echo "the bucket's bytes differ" >&2; exit 1; }
# shellcheck disable=SC2154
curl -sf "http://127.0.0.1:$((PORT + 3))$URL_s3direct" | cmp - "$OUT/1mb.bin" || { echo "the bucket's bytes differ" >&2; exit 1; }
# The first download filled the cache (in the background): wait for the verified copy.
for _ in $(seq 1 100); do [ -n "$(find "$OUT/data-s3/cache/objects" -type f 2>/dev/null)" ] && break; sleep 0.1; done
[ -n "$(find "$OUT/data-s3/cache/objects" -type f 2>/dev/null)" ] || { echo "the cache kept nothing" >&2; exit 1; }

tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# measure NAME URL PID: wrk for S seconds; prints and returns the rate.
measure() {
    local name=$1 target=$2 pid=$3 before after rps
    before=$(cpu "$pid")
    wrk -t2 -c"$C" -d"${S}s" --timeout 30s "$target" >"$OUT/$name.txt"
    after=$(cpu "$pid")
    rps=$(awk '/^Requests\/sec/{print $2}' "$OUT/$name.txt")
    local errors
    errors=$(awk '/Non-2xx or 3xx/{print $5}' "$OUT/$name.txt")
    printf '%-28s %10.1f req/s  Coffer CPU %.3f s per 1,000%s\n' "$name" "$rps" \
        "$(awk -v a="$before" -v b="$after" -v t="$tick" -v r="$rps" -v s="$S" 'BEGIN{print (b-a)/t/(r*s)*1000}')" \
        "${errors:+  ($errors non-2xx/3xx)}" >&2
    echo "$rps"
}
# shellcheck disable=SC2154
{
    health=$(measure "healthz (redirect server)" "http://127.0.0.1:$((PORT + 2))/healthz" "$PID_redirect")
    redirect=$(measure "redirect 302" "http://127.0.0.1:$((PORT + 2))$URL_redirect" "$PID_redirect")
    local_rate=$(measure "stream 1MB, local" "http://127.0.0.1:$PORT$URL_local" "$PID_local")
    s3_rate=$(measure "stream 1MB, bucket, cached" "http://127.0.0.1:$((PORT + 1))$URL_s3" "$PID_s3")
    direct_rate=$(measure "stream 1MB, bucket, no cache" "http://127.0.0.1:$((PORT + 3))$URL_s3direct" "$PID_s3direct")
}
# The store's own rate for the same object (signed GETs, 8 client threads): its ceiling here.
store=$("$PY" - "$ENDPOINT" "$S" <<'PY'
import boto3, concurrent.futures, sys, time
endpoint, seconds = sys.argv[1], float(sys.argv[2])
key = [o["Key"] for o in boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").list_objects_v2(Bucket="coffer-bench", Prefix="s3/objects/")["Contents"] if o["Size"] == 1 << 20][0]
def worker(_):
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        s3.get_object(Bucket="coffer-bench", Key=key)["Body"].read()
        n += 1
    return n
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    print("%.1f" % (sum(pool.map(worker, range(8))) / seconds))
PY
)
printf '%-28s %10.1f req/s  (botocore, 8 threads)\n' "the bucket itself, 1MB GET" "$store" >&2

verdict() { awk -v a="$1" -v b="$2" -v g="$3" -v n="$4" 'BEGIN{r=a/b; printf "%s: %.2f× (goal ≥ %.1f×) %s\n", n, r, g, (r>=g)?"met":"MISSED"}'; }
verdict "$redirect" "$health" 0.5 "redirect vs healthz"
verdict "$s3_rate" "$local_rate" 0.5 "stream from the bucket (cached) vs local stream"
verdict "$direct_rate" "$local_rate" 0.5 "stream from the bucket (no cache) vs local stream"
verdict "$direct_rate" "$store" 0 "stream through Coffer (no cache) vs the bucket's own GET rate"

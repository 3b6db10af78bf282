#!/usr/bin/env bash
# Downloads, side by side in one run: nginx serving the files itself (sendfile), Coffer
# streaming them (token checked, bytes through Hummingbird), and Coffer in X-Accel-Redirect
# mode behind nginx (token checked by Coffer, bytes by nginx). 16 concurrent clients (wrk),
# 1 MB and 100 MB assets. Reports requests/s, MB/s and the server processes' CPU seconds per
# GB served — on loopback the load generator saturates first, so CPU/GB is the fair measure.
#
#   Benchmarks/load-downloads.sh            # 10 s per measurement
#   SECONDS_EACH=20 Benchmarks/load-downloads.sh
#
# Needs wrk and nginx (apt-get install wrk nginx). Builds coffer in release into .build-release/.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SECONDS_EACH:-10}
C=${CONNECTIONS:-16}
OUT=$PWD/.build-release/downloads
P_COFFER=${PORT:-18490}
P_ACCEL_COFFER=$((P_COFFER + 1))
P_NGINX=$((P_COFFER + 2))
P_NGINX_ACCEL=$((P_COFFER + 3))
for tool in wrk nginx curl python3; do command -v "$tool" >/dev/null || [ -x /usr/sbin/$tool ] || { echo "$tool is required" >&2; exit 2; }; done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
. Benchmarks/load-common.sh

echo "building coffer (release) …" >&2
swift build -c release --product coffer --scratch-path .build-release >&2
BIN=$PWD/.build-release/release/coffer
rm -rf "$OUT" && mkdir -p "$OUT/nginx/logs" "$OUT/files"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; [ -f "$OUT/nginx/nginx.pid" ] && kill "$(cat "$OUT/nginx/nginx.pid")" 2>/dev/null || true; }
trap cleanup EXIT

ports_free "$P_COFFER" "$P_ACCEL_COFFER" "$P_NGINX" "$P_NGINX_ACCEL"
"$BIN" serve --demo --data-dir "$OUT/data" --port "$P_COFFER" --content content --rate-redemptions 0 --log-level warning >"$OUT/coffer.log" 2>&1 &
PIDS+=($!)
COFFER=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$P_COFFER/healthz" >/dev/null && break; sleep 0.1; done
ADMIN=$(awk '/admin key:/{print $3}' "$OUT/coffer.log")

# Two assets of random bytes, uploaded to Coffer and copied for plain nginx.
head -c $((1 << 20)) /dev/urandom >"$OUT/files/1mb.bin"
head -c $((100 << 20)) /dev/urandom >"$OUT/files/100mb.bin"
for a in 1mb 100mb; do
    curl -sf -X PUT -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/octet-stream' --data-binary "@$OUT/files/$a.bin" \
        "http://127.0.0.1:$P_COFFER/v1/admin/assets/bench-$a" >/dev/null
done
curl -sf -X PUT -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
    -d '{"bundleId":"com.coffer.demo","type":"nonConsumable","assetIds":["bench-1mb","bench-100mb"],"title":"bench"}' \
    "http://127.0.0.1:$P_COFFER/v1/admin/products/com.coffer.demo.bench" >/dev/null
R=$("$BIN" sandbox receipt --dir "$OUT/data/sandbox" --bundle-id com.coffer.demo --purchase com.coffer.demo.bench:7000001 --base64)
curl -sf -X POST -H 'Content-Type: application/json' -d "{\"receipt\":\"$R\"}" "http://127.0.0.1:$P_COFFER/v1/redemptions" >"$OUT/redemption.json"
url() { python3 -c "import json,sys; print([a['url'] for a in json.load(open('$OUT/redemption.json'))['assets'] if a['assetId']=='bench-$1'][0])"; }
URL1=$(url 1mb)
URL100=$(url 100mb)

# The same data directory served by a second Coffer in X-Accel-Redirect mode.
"$BIN" serve --demo --data-dir "$OUT/data" --port "$P_ACCEL_COFFER" --content content --rate-redemptions 0 --log-level warning \
    --accel-redirect /_coffer/ >"$OUT/coffer-accel.log" 2>&1 &
PIDS+=($!)
ACCEL_COFFER=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$P_ACCEL_COFFER/healthz" >/dev/null && break; sleep 0.1; done

sed "s|/var/lib/coffer/content/|$OUT/data/content/|" deploy/coffer_accel_location >"$OUT/nginx/coffer_accel_location"
cat >"$OUT/nginx/nginx.conf" <<CONF
worker_processes 1;
user root;
pid $OUT/nginx/nginx.pid;
error_log $OUT/nginx/logs/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path $OUT/nginx/body;
    proxy_temp_path $OUT/nginx/proxy;
    server { listen 127.0.0.1:$P_NGINX; root $OUT/files; }
    upstream coffer { server 127.0.0.1:$P_ACCEL_COFFER; keepalive 32; }
    server {
        listen 127.0.0.1:$P_NGINX_ACCEL;
        location / { proxy_pass http://coffer; proxy_http_version 1.1; proxy_set_header Connection ""; }
        include $OUT/nginx/coffer_accel_location;
    }
}
CONF
"$NGINX" -p "$OUT/nginx" -c "$OUT/nginx/nginx.conf"
sleep 0.5

tick=$(getconf CLK_TCK)
cpu() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
nginx_pids() { local master; master=$(cat "$OUT/nginx/nginx.pid"); echo "$master"; pgrep -P "$master"; }
measure() { # name url pids…
    local name=$1 target=$2
    shift 2
    local before after
    before=$(cpu "$@")
    wrk -t2 -c"$C" -d"${S}s" --timeout 30s "$target" >"$OUT/$name.txt"
    after=$(cpu "$@")
    local rps bytes
    rps=$(awk '/^Requests\/sec/{print $2}' "$OUT/$name.txt")
    bytes=$(awk '/^Transfer\/sec/{v=$2; u=substr(v,length(v)-1); n=substr(v,1,length(v)-2); m=(u=="GB")?1024:(u=="MB")?1:(u=="KB")?1/1024:1/1048576; print n*m}' "$OUT/$name.txt")
    awk -v n="$name" -v r="$rps" -v mb="$bytes" -v c=$((after - before)) -v t="$tick" -v s="$S" \
        'BEGIN{gb=mb*s/1024; printf "%-26s %9.1f req/s %8.1f MB/s  server CPU %.3f s/GB\n", n, r, mb, (gb>0)?(c/t)/gb:0}' | tee -a "$OUT/results.txt"
}
NG=$(nginx_pids | sort -u | tr '\n' ' ')
: >"$OUT/results.txt"
# shellcheck disable=SC2086
{
    measure "nginx 1MB" "http://127.0.0.1:$P_NGINX/1mb.bin" $NG
    measure "coffer stream 1MB" "http://127.0.0.1:$P_COFFER$URL1" "$COFFER"
    measure "coffer accel+nginx 1MB" "http://127.0.0.1:$P_NGINX_ACCEL$URL1" "$ACCEL_COFFER" $NG
    measure "nginx 100MB" "http://127.0.0.1:$P_NGINX/100mb.bin" $NG
    measure "coffer stream 100MB" "http://127.0.0.1:$P_COFFER$URL100" "$COFFER"
    measure "coffer accel+nginx 100MB" "http://127.0.0.1:$P_NGINX_ACCEL$URL100" "$ACCEL_COFFER" $NG
}
echo "server RSS (kB): coffer $(awk '/VmHWM/{print $2}' /proc/$COFFER/status) peak, accel coffer $(awk '/VmHWM/{print $2}' /proc/$ACCEL_COFFER/status) peak"

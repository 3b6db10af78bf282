#!/usr/bin/env bash
# End-to-end redemption load: the release `coffer serve` (durable ledger, synchronous=FULL)
# against wrk posting unique sandbox receipts, in three phases:
#   paced   — wrk holds the offered load at RATE redemptions/s (default 2,000, the goal's
#             rate): the latency a client sees when the server carries that load;
#   redeem  — as fast as CONNECTIONS connections go (saturation: throughput, and the latency
#             of a full queue);
#   replay  — the receipts of the paced phase again: every request is a replay (409).
#
#   Benchmarks/load-redemptions.sh                 # 10 s per phase, 32 connections
#   SECONDS_EACH=20 CONNECTIONS=64 RATE=2500 Benchmarks/load-redemptions.sh
#
# Needs wrk (apt-get install wrk). Builds coffer in release into .build-release/.
# Prints rate, latency percentiles and status counts of each phase, and the server's CPU
# seconds per 1,000 requests.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SECONDS_EACH:-10}
C=${CONNECTIONS:-32}
T=${THREADS:-1}
# Enough fresh receipts for the paced and the saturated phase (~3,000/s here) at 10 s each.
N=${RECEIPTS:-$((S * 8000))}
RATE=${RATE:-2000}
PORT=${PORT:-18480}
OUT=.build-release/load
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }

echo "building coffer (release) …" >&2
swift build -c release --product coffer --scratch-path .build-release >&2
BIN=$PWD/.build-release/release/coffer
rm -rf "$OUT" && mkdir -p "$OUT"
"$BIN" serve --demo --data-dir "$OUT/data" --port "$PORT" --content content --rate-redemptions 0 --log-level warning >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done

echo "minting $N sandbox receipts …" >&2
"$BIN" sandbox receipt --dir "$OUT/data/sandbox" --bundle-id com.coffer.demo --purchase com.coffer.demo.levelpack1:1000000 \
    --count "$N" --out-dir "$OUT/receipts" >/dev/null
# One JSON body per line, for wrk's Lua.
python3 - "$OUT" <<'PY'
import base64, os, sys
out = sys.argv[1]
with open(os.path.join(out, "bodies.ndjson"), "w") as f:
    for name in sorted(os.listdir(os.path.join(out, "receipts"))):
        with open(os.path.join(out, "receipts", name), "rb") as r:
            f.write('{"receipt":"%s"}\n' % base64.b64encode(r.read()).decode())
PY

cat >"$OUT/redeem.lua" <<'LUA'
-- Bodies START .. START+COUNT-1 of bodies.ndjson, in order, cycling. With RATE set, each
-- connection waits between requests so that the thread offers RATE/THREADS requests a
-- second (a controller corrects the wait once a second from the rate achieved; wrk's
-- latency excludes the wait).
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
local rate = tonumber(os.getenv("RATE") or "0") or 0
local threads = {}
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end
function init(args)
  stride = tonumber(os.getenv("THREADS"))
  first = tonumber(os.getenv("START") or "1")
  count = tonumber(os.getenv("COUNT") or "0")
  if first > #bodies then first = 1 end -- out of fresh receipts: what follows are replays
  if count <= 0 or first + count - 1 > #bodies then count = #bodies - first + 1 end
  i = id - stride
  statuses = {}
  if rate > 0 then
    target = rate / stride
    -- Start a little short of the interval: each request's own latency adds to the wait.
    wait = 0.8 * tonumber(os.getenv("CONNECTIONS")) / stride * 1000 / target
    second, done_this_second = os.time(), 0
  end
end
request = function()
  i = i + stride
  return wrk.format("POST", "/v1/redemptions", {["Content-Type"] = "application/json"}, bodies[first + (i - 1) % count])
end
response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if target then
    done_this_second = done_this_second + 1
    local now = os.time()
    if now ~= second then
      local achieved = done_this_second / (now - second)
      wait = math.max(0, wait * math.min(1.5, math.max(0.5, achieved / target)))
      second, done_this_second = now, 0
    end
  end
end
if rate > 0 then
  -- wrk takes whole milliseconds: round up or down at random to the wait's fraction.
  delay = function()
    local whole = math.floor(wait)
    if math.random() < wait - whole then whole = whole + 1 end
    return whole
  end
end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do total[k] = (total[k] or 0) + v end
  end
  local parts = {}
  for k, v in pairs(total) do parts[#parts + 1] = k .. "×" .. v end
  table.sort(parts)
  io.write(string.format("statuses: %s\n", table.concat(parts, " ")))
  io.write(string.format("p50_ms: %.2f p90_ms: %.2f p99_ms: %.2f max_ms: %.2f\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
  io.write(string.format("rate: %.0f\n", summary.requests / (summary.duration / 1e6)))
  io.write(string.format("requests: %d\n", summary.requests))
end
LUA

cpu() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
tick=$(getconf CLK_TCK)
phase() {
    local name=$1 start=$2 count=$3 rate=$4
    local before after
    before=$(cpu)
    BODIES="$OUT/bodies.ndjson" THREADS=$T CONNECTIONS=$C START=$start COUNT=$count RATE=$rate \
        wrk -t"$T" -c"$C" -d"${S}s" --timeout 5s -s "$OUT/redeem.lua" "http://127.0.0.1:$PORT" >"$OUT/$name.txt"
    after=$(cpu)
    local r
    r=$(awk '/^rate:/{print $2}' "$OUT/$name.txt")
    printf '%-8s %s/s  %s  %s  server CPU %.2f s per 1,000\n' "$name" "$r" "$(grep '^p50' "$OUT/$name.txt")" \
        "$(grep '^statuses' "$OUT/$name.txt")" "$(awk -v a="$before" -v b="$after" -v t="$tick" -v r="$r" -v s="$S" 'BEGIN{print (b-a)/t/(r*s)*1000}')"
}
requests() { awk '/^requests:/{print $2}' "$OUT/$1.txt"; }
echo "phase    rate       latency                                            statuses" >&2
phase paced 1 0 "$RATE"
paced=$(requests paced)
# Fresh receipts for the saturation phase start after the paced ones (plus the requests
# still in flight when wrk stopped).
phase redeem $((paced + C + 1)) 0 0
phase replay 1 "$paced" 0
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^coffer_redemptions_total' || true
"$BIN" ledger verify --data-dir "$OUT/data" | head -2 || true

-- Bodies START .. START+COUNT-1 of bodies.ndjson, in order, cycling. With RATE set, each
-- connection waits between requests so that the thread offers RATE/THREADS requests a
-- second (a controller corrects the wait once a second from the rate of the last second and
-- from the whole run's so far, so that a slow start is made up; wrk's latency excludes the
-- wait). With HISTOGRAM set, done() also writes every latency wrk recorded to that file, as
-- "microseconds count" lines, so that two wrk processes' latencies can be merged exactly.
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
    paced = wait -- the wait the last second's rate asks for; `wait` adds the whole run's correction
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
    if done_since then done_since = done_since + 1 end
    local now = os.time()
    if now ~= second then
      local achieved = done_this_second / (now - second)
      paced = math.max(0, paced * math.min(1.5, math.max(0.5, achieved / target)))
      -- Behind over the whole seconds so far: a shorter wait (at most 10%); ahead: a longer one.
      local overall = 1
      if since then
        overall = math.min(1.1, math.max(0.9, done_since / (target * (now - since))))
      else
        since, done_since = now, 0 -- the first whole second starts now
      end
      wait = paced * overall
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
  local histogram = os.getenv("HISTOGRAM")
  if histogram and histogram ~= "" then
    local f = assert(io.open(histogram, "w"))
    for i = 1, #latency do
      local value, count = latency(i)
      f:write(string.format("%d %d\n", value, count))
    end
    f:close()
  end
end

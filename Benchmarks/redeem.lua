-- Bodies START .. START+COUNT-1 of bodies.ndjson, in order, cycling. With RATE set, each
-- connection waits between requests so that the thread offers RATE/THREADS requests a
-- second (once a second a controller measures the latency the requests added to the wait and
-- sets the wait for the target rate, plus what the run so far fell short of it; wrk's
-- latency excludes the wait). With HISTOGRAM set, done() also writes every latency wrk recorded to that file, as
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
    conns = tonumber(os.getenv("CONNECTIONS")) / stride
    -- Each connection's turn is its wait plus its request's latency: start at half the
    -- interval (a little fast); the controller then measures the latency and sets the wait.
    wait = 0.5 * conns * 1000 / target
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
    if since then done_since = done_since + 1 end
    local now = os.time()
    if now ~= second and not since then
      -- The first second began at a random point: whole seconds are counted from here.
      since, done_since = now, 0
      second, done_this_second = now, 0
    elseif now ~= second then
      local achieved = done_this_second / (now - second)
      -- The latency each turn added to the wait, smoothed over the seconds.
      local measured = math.max(0, conns * 1000 / achieved - wait)
      latency = latency and (latency + measured) / 2 or measured
      -- Aim at the target, plus what the whole seconds so far fell short of it (at most 10%).
      local behind = target * (now - since) - done_since
      local want = target + math.max(-0.1 * target, math.min(0.1 * target, behind))
      wait = math.max(0, conns * 1000 / want - latency)
      if os.getenv("PACE_DEBUG") then io.stderr:write(string.format("pace %d achieved %.0f measured %.2f latency %.2f want %.0f wait %.2f\n", now, achieved, measured, latency, want, wait)) end
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
  -- Socket errors wrk counted (a failed connection, read or write; its --timeout) come with no
  -- answer and no latency: they are listed here, so that a phase with any is not all 201s.
  for _, k in ipairs({"connect", "read", "write", "timeout"}) do
    if summary.errors[k] > 0 then parts[#parts + 1] = k .. "-error×" .. summary.errors[k] end
  end
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

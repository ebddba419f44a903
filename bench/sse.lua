-- bench/sse.lua: wrk script for bench/run.sh's sse feature rows.
--
-- GET /sse/<n>?events=SSE_EVENTS (default 1000) over BENCH_PATHS paths, in
-- bench/paths.lua's order: bench/upstream answers each with a
-- text/event-stream of that many events, each written and flushed on its
-- own. wrk times each whole stream, so a request's latency is the time to
-- its last event, and a request's CPU is SSE_EVENTS events'.

local n = tonumber(os.getenv("BENCH_PATHS") or "") or 100000
local events = tonumber(os.getenv("SSE_EVENTS") or "") or 1000
local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end
local stride = 7919 -- as paths.lua
if gcd(n, stride) ~= 1 then stride = 1 end

local reqs = {}
function init(args)
  for k = 0, n - 1 do
    reqs[k] = wrk.format("GET", "/sse/" .. k .. "?events=" .. events, { ["Accept"] = "text/event-stream" })
  end
end

local i = 0
request = function()
  i = (i + stride) % n
  return reqs[i]
end

-- bench/paths.lua: wrk script for bench/run.sh.
--
-- Spreads requests over BENCH_PATHS (default 100000) distinct paths
-- /k/<n>, so that a hashing proxy routes them to every upstream and no
-- single key dominates. The requests are formatted once, up front, so that
-- per request wrk only hands back a prebuilt string: the load generator
-- shares a core with the upstreams and must stay cheap.
--
-- Paths are visited with a stride that is coprime to the path count, so a
-- run walks every path in a scrambled order instead of 0, 1, 2, ...
-- (deterministic, unlike math.random, so every target sees the same
-- sequence).

local n = tonumber(os.getenv("BENCH_PATHS") or "") or 100000
local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end
local stride = 7919 -- prime, coprime to 100000 = 2^5 * 5^5
if gcd(n, stride) ~= 1 then stride = 1 end

-- Built in init (once per thread), not at load time: only then has wrk
-- filled in wrk.headers.Host, and a request without Host gets a 400.
local reqs = {}
function init(args)
  for k = 0, n - 1 do
    reqs[k] = wrk.format("GET", "/k/" .. k)
  end
end

local i = 0
request = function()
  i = (i + stride) % n
  return reqs[i]
end

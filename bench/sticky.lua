-- bench/sticky.lua: wrk script for bench/run.sh's targets that keep a
-- client on its upstream with a cookie rather than by hashing the request
-- (Traefik: weighted round robin with a sticky cookie).
--
-- The paths of bench/paths.lua, in the same order; request /k/<n> carries
-- the cookie STICKY_COOKIE names, NAME=V0,V1,...: NAME=V(n mod the number
-- of values). run.sh learns the values (one per upstream) from the proxy's
-- Set-Cookie before the runs, so each path is a client whose cookie names
-- one upstream, every upstream gets a share, and the proxy routes each
-- request by the cookie it carries instead of by the round robin.

local n = tonumber(os.getenv("BENCH_PATHS") or "") or 100000
local spec = os.getenv("STICKY_COOKIE") or ""
local name, list = spec:match("^([^=]+)=(.+)$")
if not name then error("STICKY_COOKIE must be NAME=V0,V1,...") end
local values = {}
for v in list:gmatch("[^,]+") do values[#values + 1] = v end

local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end
local stride = 7919 -- as paths.lua
if gcd(n, stride) ~= 1 then stride = 1 end

local reqs = {}
function init(args)
  for k = 0, n - 1 do
    reqs[k] = wrk.format("GET", "/k/" .. k, { ["Cookie"] = name .. "=" .. values[(k % #values) + 1] })
  end
end

local i = 0
request = function()
  i = (i + stride) % n
  return reqs[i]
end

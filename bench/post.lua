-- bench/post.lua: wrk script for bench/run.sh's feature runs (post, json).
--
-- POSTs with JSON bodies of POST_BODY bytes (default 4096),
-- {"user":"<n>","pad":"xxx..."}, over POST_KEYS (default 1000) distinct
-- users and the path /k/<n> of the same n, so that a uri key and a
-- json: user key both spread them over every upstream. Formatted once, in
-- init, as bench/paths.lua does.

local keys = tonumber(os.getenv("POST_KEYS") or "") or 1000
local size = tonumber(os.getenv("POST_BODY") or "") or 4096
local stride = 7919
local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end
if gcd(keys, stride) ~= 1 then stride = 1 end

local reqs = {}
function init(args)
  for k = 0, keys - 1 do
    local head = '{"user":"' .. k .. '","pad":"'
    local pad = size - #head - 2
    if pad < 0 then pad = 0 end
    local body = head .. string.rep("x", pad) .. '"}'
    reqs[k] = wrk.format("POST", "/k/" .. k, { ["Content-Type"] = "application/json" }, body)
  end
end

local i = 0
request = function()
  i = (i + stride) % keys
  return reqs[i]
end

-- bench/chat.lua: wrk script for bench/run.sh's prefix feature rows.
--
-- POSTs OpenAI-style chat completion bodies of CHAT_BODY bytes (default
-- 4096), as internal/testutil/chat builds them, over CHAT_KEYS (default
-- 100) conversations: conversation <n> goes to /k/<n> (so that a uri key
-- spreads them too, the rows' base) and its body starts with a system
-- message naming it, so that the first bytes of the prompt, what a prefix
-- key hashes, differ from one conversation to the next. Formatted once, in
-- init, as bench/paths.lua does.

local keys = tonumber(os.getenv("CHAT_KEYS") or "") or 100
local size = tonumber(os.getenv("CHAT_BODY") or "") or 4096
local stride = 7919
local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end
if gcd(keys, stride) ~= 1 then stride = 1 end

local turn = ' lorem ipsum dolor sit amet'
local function body(k)
  local parts = {
    '{"model":"llama-3.1-70b-instruct","messages":[',
    '{"role":"system","content":"Conversation ' .. k .. '. You are a careful assistant; answer briefly."}',
  }
  local tail = '],"temperature":0.7,"max_tokens":512,"stream":true}'
  local len = #parts[1] + #parts[2] + #tail
  local i = 0
  while true do
    local m = ',{"role":"user","content":"Turn ' .. i .. ': summarise the \\"quarterly\\" report, section ' .. i ..
      '.\\nKeep it short; list the risks.' .. string.rep(turn, 8) .. '"}'
    if len + #m > size then break end
    parts[#parts + 1] = m
    len = len + #m
    i = i + 1
  end
  local pad = size - len
  if pad > 0 then -- the last bytes: one more message padded to the size
    local head = ',{"role":"user","content":"'
    local n = pad - #head - 2
    if n >= 0 then
      parts[#parts + 1] = head .. string.rep("x", n) .. '"}'
    end
  end
  parts[#parts + 1] = tail
  return table.concat(parts)
end

local reqs = {}
function init(args)
  for k = 0, keys - 1 do
    reqs[k] = wrk.format("POST", "/k/" .. k, { ["Content-Type"] = "application/json" }, body(k))
  end
end

local i = 0
request = function()
  i = (i + stride) % keys
  return reqs[i]
end

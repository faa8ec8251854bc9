-- Sluice's Redis wrapper for policies with a penalty (sluice.Penalty): the
-- store puts plain.lua or sluice.lua at the decide marker below, and sends
-- the result for every take, peek and reserve of such a policy, so that the
-- penalty record is read and written in the decision's own call. KEYS are
-- the decision's, then the record's key (same hash tag); ARGV are the
-- decision's, then After, Forget in µs and the block durations in µs,
-- comma-separated.
--
-- The record holds, packed as four doubles, the block's end and the last
-- strike (µs), the offences and the strikes of the current offence window.
-- A blocked key gets, without deciding anything, the decision's reply with
-- wait -1 (the store's mark of a block) and every limit denied with
-- RetryAfter and ResetAfter up to the block's end. A take that the limits
-- deny is a strike; After strikes make an offence, which blocks the key.
local pkey = KEYS[#KEYS]
local pafter, pforget, pblocks = tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1]), ARGV[#ARGV]
local pnl = tonumber(ARGV[5])
--[[clock.lua]]
local pnow, pslack = clock(ARGV[3])
local bend, last, offences, strikes = 0, 0, 0, 0
local pv = redis.call('GET', pkey)
if pv and #pv == 32 then bend, last, offences, strikes = struct.unpack('<dddd', pv) end

local function blocked(now, retry)
  local out = {now, -1}
  for _ = 1, pnl do
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = retry
    out[#out + 1] = retry
  end
  return out
end

if pnow < bend then return blocked(pnow, bend - pnow) end

local reply = (function()
--[[decide]]
end)()

if ARGV[1] ~= 'take' then return reply end
for i = 1, pnl do
  if reply[3 + (i - 1) * 4] ~= 1 then
    -- Denied: a strike. A record whose offence window has passed starts
    -- afresh.
    local now = reply[1]
    if now >= math.max(last, bend) + pforget then
      bend, last, offences, strikes = 0, 0, 0, 0
    end
    strikes, last = strikes + 1, now
    local block = false
    if strikes >= pafter then
      offences, strikes, block = offences + 1, 0, true
      local k, d = 0, 0
      for b in string.gmatch(pblocks, '%d+') do
        k, d = k + 1, tonumber(b)
        if k >= offences then break end
      end
      bend = now + d
    end
    redis.call('SET', pkey, struct.pack('<dddd', bend, last, offences, strikes), 'PX', ttl(math.max(last, bend) + pforget - now, pslack))
    if block then return blocked(now, bend - now) end
    return reply
  end
end
return reply

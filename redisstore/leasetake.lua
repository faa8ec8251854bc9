-- Sluice's Redis wrapper that decides a rate policy and a concurrency lease
-- in one call (sluice.LeaseTaker): the store puts the policy's decision
-- script (plain.lua or sluice.lua, or their penalty.lua forms) at the
-- decide marker below. KEYS are the decision's, then the lease set's
-- (lease.lua's key, the same hash tag when the names match); ARGV are the
-- decision's for a take, then the lease id, the limit and the lease
-- timeout in µs.
--
-- It first drops the expired leases. With a slot free, it decides the take
-- and adds the lease only if every limit admitted it; with none free, it
-- decides a peek instead, charging nothing. It returns the decision's
-- reply followed by lease.lua's last four values: granted, leases held,
-- µs until the earliest lease expires when no slot was free else 0, µs
-- until the last lease expires.
local lkey = KEYS[#KEYS]
local lid, llimit, llease = ARGV[#ARGV - 2], tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])
--[[clock.lua]]
local lnow, lslack = clock(ARGV[3])
redis.call('ZREMRANGEBYSCORE', lkey, '-inf', lnow)
local free = redis.call('ZCARD', lkey) < llimit

-- The decision sees its own KEYS and ARGV, without the lease's.
local dkeys, dargv = {}, {}
for i = 1, #KEYS - 1 do dkeys[i] = KEYS[i] end
for i = 1, #ARGV - 3 do dargv[i] = ARGV[i] end
if not free then dargv[1] = 'peek' end
local reply = (function(KEYS, ARGV)
--[[decide]]
end)(dkeys, dargv)

local granted, retry = 0, 0
if free then
  granted = 1
  local nl = tonumber(ARGV[5])
  for i = 1, nl do
    if reply[3 + (i - 1) * 4] ~= 1 then granted = 0 end
  end
  if reply[2] == -1 then granted = 0 end -- blocked by a penalty
  if granted == 1 then redis.call('ZADD', lkey, lnow + llease, lid) end
else
  local first = redis.call('ZRANGE', lkey, 0, 0, 'WITHSCORES')
  retry = tonumber(first[2]) - lnow
end

local n, reset = redis.call('ZCARD', lkey), 0
if n > 0 then
  local last = redis.call('ZRANGE', lkey, -1, -1, 'WITHSCORES')
  reset = tonumber(last[2]) - lnow
  if granted == 1 then
    redis.call('PEXPIRE', lkey, ttl(reset, lslack))
  end
end
reply[#reply + 1] = granted
reply[#reply + 1] = n
reply[#reply + 1] = retry
reply[#reply + 1] = reset
return reply

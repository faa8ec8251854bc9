-- Sluice's Redis script for concurrency leases. KEYS[1] is a sorted set
-- of the leases of one name and key: member the lease id, score its expiry
-- in µs. ARGV: op ("acquire", "renew", "release", "peek" or "reset"), the
-- lease id, the time
-- in µs ("" for the server's TIME), the limit, the lease timeout in µs.
--
-- Every call first removes the expired leases, then acts, then sets the
-- key's TTL to the time until its last lease expires (the set is removed
-- with its last member). It returns {now, granted (0 or 1), leases held,
-- µs until the earliest lease expires when refused else 0, µs until the
-- last lease expires or 0}.

local key, op, id = KEYS[1], ARGV[1], ARGV[2]
--[[clock.lua]]
local now, slack = clock(ARGV[3])

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)

local granted, retry = 0, 0
if op == 'acquire' then
  local n = redis.call('ZCARD', key)
  if n < tonumber(ARGV[4]) then
    redis.call('ZADD', key, now + tonumber(ARGV[5]), id)
    granted = 1
  else
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    retry = tonumber(first[2]) - now
  end
elseif op == 'renew' then
  if redis.call('ZSCORE', key, id) then
    redis.call('ZADD', key, 'XX', now + tonumber(ARGV[5]), id)
    granted = 1
  end
elseif op == 'release' then
  granted = redis.call('ZREM', key, id)
elseif op == 'peek' then
  if redis.call('ZCARD', key) >= tonumber(ARGV[4]) then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    retry = tonumber(first[2]) - now
  end
elseif op == 'reset' then
  redis.call('DEL', key)
else
  return redis.error_reply('unknown op ' .. tostring(op))
end

local n, reset = redis.call('ZCARD', key), 0
if n > 0 then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  reset = tonumber(last[2]) - now
  if granted == 1 and op ~= 'release' then
    redis.call('PEXPIRE', key, ttl(reset, slack))
  end
end
return {now, granted, n, retry, reset}

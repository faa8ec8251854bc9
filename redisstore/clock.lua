-- The time of a call and the TTLs of its keys: a piece that the store puts
-- into every script at its marker (see redisstore.go).

-- clock returns the call's time in µs and the slack of its TTLs, given the
-- script's time argument t: the caller's time in µs, or "" for the server's
-- TIME. TTLs run on the server's clock, which a caller's clock (a test's
-- fake clock) need not keep pace with, so with the caller's time every TTL
-- is an hour (3600000 ms) longer than its state needs.
local function clock(t)
  if t ~= '' then return tonumber(t), 3600000 end
  local s = redis.call('TIME')
  return s[1] * 1000000 + s[2], 0
end

-- ttl returns the TTL in ms of a key whose state is fresh again in us µs:
-- rounded up, at least 1, plus the slack from clock.
local function ttl(us, slack)
  return math.max(math.ceil(us / 1000), 1) + slack
end

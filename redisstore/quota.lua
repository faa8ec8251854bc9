-- Sluice's Redis script for quota leases and async counts (sluice.SyncLease
-- and sluice.SyncAsync), for one limit in plain arithmetic: token_bucket,
-- gcra or fixed_window. It keeps the limit's state in the same key and
-- format as plain.lua, and mirrors its arithmetic.
--
-- KEYS: the state key, its auxiliary key (read only to carry a sliding_log
-- state), and the key of the bucket's lease records (a hash: lease id ->
-- "units:expiry µs"; windows keep none).
-- ARGV: op ("grant", "return" or "sync"), the time in µs ("" for the
-- server's TIME), the limit's alg, count, period (µs), burst, l, p and
-- definition, then: want, need, lease time to live (µs), lease id, the id
-- of a lease to return first (for a window: its window start; "" for
-- none), and the units to return.
--
-- grant: returns the lease given first (if any), then takes up to want
-- units and at least need, or none. A lease time of 0 takes exactly as a
-- decision would, keeping no record.
-- return: returns the lease given, nothing else.
-- sync: charges want units unconditionally (async counts; for a window,
-- only if the window started at the sixth op argument is still current).
-- reserve and cancel (buckets only): Reserve of want units within need
-- µs, and Cancel of want units reserved for the time need, minding the
-- lease records.
--
-- A bucket's lease records keep it exact: while leases are live, the
-- bucket's debt never falls below the units they were granted (their
-- unused units are still tokens, held elsewhere), so that the tokens in
-- the bucket and those held in leases never exceed Burst. A lease returned
-- gives back its unused units (its record must still be live: a lease
-- expired is spent in full); an expired record is dropped by the next
-- call, its units staying charged as of that call.
--
-- Reply: {now, granted, remaining, retry, reset, until}: the units granted
-- (0 when refused), the units left in the shared store after the call,
-- the µs until need units would be granted when refused, the µs until the
-- limit is back to full, and the time (µs) the lease ends: its expiry, or
-- for a window the window's end if sooner.

--[[clock.lua]]
--[[arith.lua]]
--[[bucket.lua]]

local carry

local op = ARGV[1]
-- now is the call's time in µs; slack pads its TTLs (see clock.lua).
local now, slack = clock(ARGV[2])
local alg, count, period, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local l, p, def = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local want, need, life, id = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), ARGV[13]
local retID, retUnits = ARGV[14], tonumber(ARGV[15])
local key, aux, grants = KEYS[1], KEYS[2], KEYS[3]

local T, A, B = 0, 0, 0
local s = redis.call('GET', key)
if s then
  if #s == #def + 24 and string.sub(s, 1, #def) == def then
    T, A, B = struct.unpack('<ddd', s, #def + 1)
  else
    carry = carry or (function()
--[[carry.lua]]
    end)()
    T, A, B = carry(s, def, {alg, count, period, burst, l, p}, now, key, aux, slack, true)
  end
end

local granted, remaining, retry, reset, ends = 0, 0, 0, 0, 0

if alg == 3 then
  -- FixedWindow: a lease is a slice of the current window's count, and
  -- ends with the window.
  local start = startFor(T, now, period)
  local c = 0
  if T == start then c = A end
  if retID ~= '' and tonumber(retID) == start then
    c = math.max(c - retUnits, 0)
  end
  if op == 'grant' then
    local k = math.min(want, count - c)
    if k >= need then
      granted = k
      c = c + k
      ends = math.min(now + life, start + period)
      if life == 0 then ends = now end
    else
      retry = start + period - now
    end
  elseif op == 'sync' then
    if tonumber(ARGV[16]) == start then c = c + want end
  end
  remaining = math.max(count - c, 0)
  if c > 0 then
    reset = start + period - now
    redis.call('SET', key, def .. struct.pack('<ddd', start, c, 0), 'PX', ttl(reset, slack))
  else
    redis.call('DEL', key)
  end
  return {now, granted, remaining, retry, reset, ends}
end

-- TokenBucket (alg 1) and GCRA (alg 2): the debt d in ticks (algo.Rule.debt).
local cap = burst * p
local d = debt(alg, T, A, B, now, cap, l, p)

-- The lease records: the debt is at least every recorded lease's units
-- (the expired included, whose units become plain debt as of now), then
-- the expired are dropped.
local held, last = 0, 0
local recs = redis.call('HGETALL', grants)
local live = {}
for j = 1, #recs, 2 do
  local u, exp = string.match(recs[j + 1], '^(%d+):(%d+)$')
  u, exp = tonumber(u), tonumber(exp)
  held = held + u
  if exp <= now then
    redis.call('HDEL', grants, recs[j])
  else
    live[recs[j]] = u
  end
end
d = math.max(d, held * p)
held = 0
for _, u in pairs(live) do held = held + u end

if retID ~= '' and live[retID] then
  local u = math.min(retUnits, live[retID])
  redis.call('HDEL', grants, retID)
  held = held - live[retID]
  live[retID] = nil
  d = math.max(d - u * p, held * p)
end

if op == 'grant' then
  local k = math.min(want, floor((cap - d) / p))
  if k >= need then
    granted = k
    d = d + k * p
    ends = now
    if life > 0 then
      ends = now + life
      redis.call('HSET', grants, id, string.format('%.0f:%.0f', k, ends))
      held = held + k
    end
  else
    retry = divCeil(d - (cap - need * p), l)
  end
elseif op == 'sync' then
  d = d + want * p
elseif op == 'reserve' then
  -- Reserve want units at the earliest time they fit, if within need µs
  -- (algo.Rule.Wait): charged now, which for a bucket's debt is the same.
  local room = cap - want * p
  if d > room then retry = divCeil(d - room, l) end
  if retry <= need then
    granted = want
    d = d + want * p
  end
elseif op == 'cancel' then
  -- Give back want units of a reservation due at need µs, if still to
  -- come; never below the leases' units.
  if need > now then d = math.max(d - want * p, held * p) end
end

remaining = math.max(floor((cap - d) / p), 0)
reset = divCeil(d, l)
saveBucket(key, def, alg, d, now, burst, cap, l, p, slack)
if held > 0 then
  local most = 0
  for _, v in ipairs(redis.call('HVALS', grants)) do
    local exp = tonumber(string.match(v, ':(%d+)$'))
    if exp > most then most = exp end
  end
  redis.call('PEXPIRE', grants, ttl(most - now, slack))
else
  redis.call('DEL', grants)
end
return {now, granted, remaining, retry, reset, ends}

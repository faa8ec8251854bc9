-- Sluice's Redis script for policies whose every limit runs on plain
-- numbers: the store sends it instead of sluice.lua when every intermediate
-- value of every limit stays below 2^52, where Lua's doubles are exact
-- integers (nearly all real rules). It takes the same KEYS and ARGV (and
-- one op more, "each", below), returns the same reply, keeps the same state
-- in the same keys and makes the same decisions as sluice.lua, and mirrors
-- package algo's Go code as that does.
--
-- It is written for speed: Redis runs the whole chunk on every call, and
-- each local function in it is a closure built anew every time, so it
-- takes only the pieces it needs (clock.lua and arith.lua, put in below by
-- the store: six small routines) and adds one of its own, leased; the
-- others are built only on the paths that call them (load for reserve and
-- cancel, bucket.lua's saveBucket inside cancel, write for several limits
-- or a sliding_log, carry.lua when a state was written under another
-- definition). It parses only the arguments a decision reads (each parse
-- runs strtod) and creates no tables but its reply (and, for policies of
-- several limits, one table of pending writes per request): the
-- algorithms are inline in the main loop and their arithmetic is plain
-- operators.

--[[clock.lua]]
--[[arith.lua]]

-- tonumber, looked up once: every decision parses its arguments with it.
local tonumber = tonumber

-- carry, built on first use: see carry.lua.
local carry

-- leased returns the units of the quota leases on the bucket whose state
-- is at key, as ticks of debt (units × p), and the ids of the lease
-- records that have expired (nil if none): quota.lua records the leases
-- of processes deciding the limit in lease mode at key .. ':g' (id ->
-- "units:expiry µs"), and the bucket's debt never falls below them, so
-- that a process deciding exactly beside them never spends the tokens
-- they hold. A lease that has expired may have been spent in full up to
-- its end: its units count as debt as of now until a write of the
-- bucket's state takes them in and deletes its record, as quota.lua does.
-- A key never leased has no record: one EXISTS.
local function leased(key, now, p)
  local g = key .. ':g'
  if redis.call('EXISTS', g) == 0 then return 0, nil end
  local held, expired = 0, nil
  local recs = redis.call('HGETALL', g)
  for j = 1, #recs, 2 do
    local u, exp = string.match(recs[j + 1], '^(%d+):(%d+)$')
    held = held + tonumber(u)
    if tonumber(exp) <= now then
      expired = expired or {}
      expired[#expired + 1] = recs[j]
    end
  end
  return held * p, expired
end

local op, n, nl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5])
-- A batch (several policies and keys decided together, op "batch") gives
-- each limit its own cost, in the nl arguments after the limits'. Op "each"
-- (only in this script) is a batch of independent requests, as the store
-- gathers concurrent takes into one call: after the costs come the number
-- of limits of each request, and each request is charged to all of its
-- limits or to none, in order, as if by calls of "take" one after the
-- other at the same time.
local costs, groups, gend
if op == 'batch' or op == 'each' then costs = 5 + nl * 8 end
if op == 'each' then groups, gend = costs + nl + 1, tonumber(ARGV[costs + nl + 1]) end
-- now is the call's time in µs; slack pads its TTLs (see clock.lua).
local now, slack = clock(ARGV[3])

-- The state of a limit: its definition, "alg:count:period:burst;" (the
-- last of each limit's arguments), then as in algo.State three doubles
-- (struct.pack '<ddd'; every state value is an integer below 2^53), or
-- nothing for a fresh key. A state written under another definition is
-- carried to the limit's (carry.lua) and, except by peek, stored so. The
-- main loop decodes inline; cancel and reserve use load, for limit i. Only
-- they read arg: maxWait (reserve) or the due time (cancel), in µs.
local load, arg
if op == 'cancel' or op == 'reserve' then
  arg = tonumber(ARGV[4])
  load = function(i)
    local b = 5 + (i - 1) * 8
    local key, def = KEYS[2 * i - 1], ARGV[b + 8]
    local v = redis.call('GET', key)
    if not v then return 0, 0, 0 end
    if #v == #def + 24 and string.sub(v, 1, #def) == def then return struct.unpack('<ddd', v, #def + 1) end
    carry = carry or (function()
--[[carry.lua]]
    end)()
    local T, A, B = carry(v, def, {tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]),
      tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])}, now, key, KEYS[2 * i], slack, true)
    return T, A, B
  end
end

if op == 'cancel' then
  -- algo.Rule.Refund for every limit (all are buckets).
--[[bucket.lua]]
  if arg > now then
    for i = 1, nl do
      local b = 5 + (i - 1) * 8
      local alg, burst, l, p = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
      local key = KEYS[2 * i - 1]
      local T, A, B = load(i)
      if not (T == 0 and A == 0 and B == 0) then
        local held, expired = leased(key, now, p)
        local d = math.max(debt(alg, T, A, B, now, burst * p, l, p) - n * p, held)
        if expired then redis.call('HDEL', key .. ':g', unpack(expired)) end
        saveBucket(key, ARGV[b + 8], alg, d, now, burst, burst * p, l, p, slack)
      end
    end
  end
  return {now, 0}
end

-- Reserve: the earliest time every limit admits n (algo.Rule.Wait).
local at, wait, commit = now, 0, op == 'take' or op == 'batch' or op == 'each'
if op == 'peek' then n = 0 end
if op == 'reserve' then
  for i = 1, nl do
    local b = 5 + (i - 1) * 8
    local alg, burst, l, p = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
    local T, A, B = load(i)
    local d = math.max(debt(alg, T, A, B, now, burst * p, l, p), (leased(KEYS[2 * i - 1], now, p)))
    local room = (burst - n) * p
    if d > room then wait = math.max(wait, divCeil(d - room, l)) end
  end
  if wait <= arg then
    at, commit = now + wait, true
  end
end
commit = commit and n > 0

-- write makes the writes in pend (limit, value, TTL in ms, expired lease
-- records; for sliding_log, what recording needs). A single limit other
-- than a sliding_log writes at once, below, and builds no closure for it.
local write
if nl > 1 or ARGV[6] == '5' then
  write = function(pend)
    for _, w in ipairs(pend) do
      local i, v, px = w[1], w[2], w[3]
      local key = KEYS[2 * i - 1]
      if type(v) == 'string' then
        redis.call('SET', key, v, 'PX', px)
        if w[4] then redis.call('HDEL', key .. ':g', unpack(w[4])) end
      else
        -- Record a sliding_log request (algo.Log.record): the entries lie in
        -- the auxiliary key, the state key holds the definition, sum and seq.
        local live, sum, seq, stamp, n = v[1], v[2], v[3], v[4], v[5]
        local b = 5 + (i - 1) * 8
        local period, log = tonumber(ARGV[b + 3]), KEYS[2 * i]
        if live ~= sum then
          redis.call('ZREMRANGEBYSCORE', log, '-inf', string.format('%.0f', at - period))
          sum = live
        end
        seq = seq + 1
        sum = sum + n
        redis.call('ZADD', log, string.format('%.0f', stamp), string.format('%.0f:%.0f', seq, n))
        redis.call('PEXPIRE', log, px)
        redis.call('SET', key, ARGV[b + 8] .. struct.pack('<dd', sum, seq), 'PX', px)
      end
    end
  end
end

-- Decide every limit at time at. A request is charged to every limit or to
-- none: the writes wait in pend until every limit has admitted it (for
-- "each", every limit of that request).
local out, all, pend = {now, wait}, true, nil
for i = 1, nl do
  local b = 5 + (i - 1) * 8
  local alg, count, period = tonumber(ARGV[b + 1]), nil, nil
  -- Windows count per period; a bucket's rate is l/p, and it needs its
  -- count and period only to carry a state.
  if alg > 2 then count, period = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]) end
  local key, def = KEYS[2 * i - 1], ARGV[b + 8]
  local ok, remaining, retry, reset = false, 0, 0, 0
  local expired -- a bucket's expired lease records, deleted if v is written
  local v -- the new state, when admitted and charged
  local n = n
  if costs then n = tonumber(ARGV[costs + i]) end
  local cost = n
  if n == 0 then cost = 1 end
  local T, A, B = 0, 0, 0
  -- For sliding_log: the sum and seq of the state key, and, for a log
  -- carried by peek (nothing written), the units of its one entry at now.
  local sum, seq, vlog = 0, 0, nil
  local s = redis.call('GET', key)
  if s then
    local size = #def + 24
    if alg == 5 then size = #def + 16 end
    if #s == size and string.sub(s, 1, #def) == def then
      if alg ~= 5 then
        T, A, B = struct.unpack('<ddd', s, #def + 1)
      else
        sum, seq = struct.unpack('<dd', s, #def + 1)
      end
    else
      carry = carry or (function()
--[[carry.lua]]
      end)()
      local x, y, z = carry(s, def, {alg, tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]),
        tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])}, now, key, KEYS[2 * i], slack, op ~= 'peek')
      if alg ~= 5 then
        T, A, B = x, y, z
      elseif x == 'keep' then
        sum, seq = y, z
      elseif op == 'peek' then
        vlog = y
      elseif y > 0 then
        sum, seq = y, z
      end
    end
  end
  if alg <= 2 then
    -- TokenBucket and GCRA (algo.Rule.evalBucket): the debt d in ticks.
    local burst, l, p = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
    local cap = burst * p
    -- The leases' floor is debt as of now (as quota.lua's), refilled by
    -- a reservation's time at.
    local held
    held, expired = leased(key, now, p)
    local d = math.max(debt(alg, T, A, B, at, cap, l, p), held - (at - now) * l)
    local room = cap - cost * p
    ok = d <= room
    if not ok then
      retry = divCeil(d - room, l)
    elseif n > 0 then
      d = d + n * p
    end
    local used, rem = divmod(d, p)
    if rem ~= 0 then
      remaining = math.max(burst - used - 1, 0)
    else
      remaining = math.max(burst - used, 0)
    end
    local q, frac = divmod(d, l)
    reset = q
    if frac ~= 0 then reset = q + 1 end
    if ok and commit then
      if alg == 2 then
        v = def .. struct.pack('<ddd', at + q, frac, 0)
      elseif rem == 0 then
        v = def .. struct.pack('<ddd', at, burst - used, 0)
      else
        v = def .. struct.pack('<ddd', at, burst - used - 1, p - rem)
      end
    end
  elseif alg == 3 then
    -- FixedWindow (algo.Rule.evalFixed).
    local start = startFor(T, at, period)
    local c = 0
    if T >= start then start, c = T, A end
    ok = c + cost <= count
    if ok and commit then
      c = c + n
      v = def .. struct.pack('<ddd', start, c, 0)
    end
    local stop = start + period - at
    if not ok then retry = stop end
    remaining = count - c
    if c > 0 then reset = stop end
  elseif alg == 4 then
    -- SlidingWindow (algo.Rule.evalSliding).
    local P = period
    local start = startFor(T, at, P)
    local prev, cur = 0, 0
    if T >= start then
      start, prev, cur = T, A, B
    elseif T + P == start then
      prev = B
    end
    local weighted = prev * (P - math.max(at - start, 0))
    local limit = count * P
    ok = limit >= weighted + (cur + cost) * P
    if ok and commit then
      cur = cur + n
      v = def .. struct.pack('<ddd', start, prev, cur)
    end
    if not ok then
      -- algo.Rule.slidingRetry
      if cur + cost > count then
        local keep = divmod((count - cost) * P, cur)
        retry = start + P - at + P - keep
      else
        local keep = divmod((count - cur - cost) * P, prev)
        retry = start + P - keep - at
      end
    end
    remaining = divmod(math.max(limit - (weighted + cur * P), 0), P)
    if cur > 0 then
      reset = start + 2 * P - at
    elseif prev > 0 then
      reset = start + P - at
    end
  else
    -- SlidingLog (algo.Log): in the auxiliary key, a sorted set of admitted
    -- requests (member "seq:cost", score the time); in the state key, after
    -- the definition, sum and seq: the total cost and the last sequence
    -- number, which makes members unique even within one microsecond.
    local log = KEYS[2 * i]
    -- Entries at or before at−period no longer count; they are removed only
    -- when a request is recorded, so that evaluating changes nothing.
    local live = sum
    if vlog then
      live = vlog
    else
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', log, '-inf', string.format('%.0f', at - period))) do
        live = live - tonumber(string.match(m, ':(%d+)$'))
      end
    end
    ok = live + cost <= count
    local used = live
    if ok then
      used = used + n
    elseif vlog then
      -- The carried log's one entry, at now, frees all of it.
      retry = now + period - at
    else
      local free = live + cost - count
      local all = redis.call('ZRANGEBYSCORE', log, '(' .. string.format('%.0f', at - period), '+inf', 'WITHSCORES')
      for j = 1, #all, 2 do
        free = free - tonumber(string.match(all[j], ':(%d+)$'))
        if free <= 0 then
          retry = tonumber(all[j + 1]) + period - at
          break
        end
      end
    end
    remaining = math.max(count - used, 0)
    if used > 0 then
      local last
      if vlog then
        last = {'', now}
      else
        last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
      end
      local newest = at
      if #last > 0 and live > 0 then
        local t = tonumber(last[2])
        if ok and n > 0 then newest = math.max(newest, t) else newest = t end
      end
      reset = newest + period - at
      if ok and commit then
        -- The new entry goes after the newest: the newest before removal
        -- is the newest after it, unless removal empties the set.
        local stamp = at
        if #last > 0 then stamp = math.max(stamp, tonumber(last[2])) end
        v = {live, sum, seq, stamp, n}
      end
    end
  end

  local px -- the TTL in ms, when v is written
  if v then px = ttl(at - now + reset, slack) end
  if nl == 1 and alg ~= 5 then
    if v then
      redis.call('SET', key, v, 'PX', px)
      if expired then redis.call('HDEL', key .. ':g', unpack(expired)) end
    end
    return {now, wait, ok and 1 or 0, remaining, retry, reset}
  end
  all = all and ok
  local j = 2 + (i - 1) * 4
  out[j + 1] = ok and 1 or 0
  out[j + 2] = remaining
  out[j + 3] = retry
  out[j + 4] = reset
  if all and v then
    pend = pend or {}
    pend[#pend + 1] = {i, v, px, expired}
  end
  if i == gend then
    -- The last limit of one of "each"'s requests.
    if all and pend then write(pend) end
    all, pend, groups = true, nil, groups + 1
    local g = ARGV[groups]
    if g then gend = gend + tonumber(g) end
  end
end

if all and pend then write(pend) end
return out

-- Sluice's Redis script: every algorithm of package algo, decided and charged
-- atomically in one call. It mirrors algo's Go code line by line, in
-- microseconds instead of nanoseconds, and is held to it by the conformance
-- suite. The store sends it for policies with a rule that needs big-number
-- arithmetic; plain.lua, the same decisions in plain arithmetic written for
-- speed, serves every other policy.
--
-- KEYS: two per limit: the state key, and an auxiliary key used by
--       sliding_log for its entries (both carry the same hash tag, so they
--       share a slot).
-- ARGV: op ("take", "peek", "reserve", "cancel", "batch", "charge"), cost
--       n, now in µs ("" to use the server's TIME), maxWait (reserve) or
--       due time (cancel) in µs, the number of limits, then per limit:
--       algorithm (1 token_bucket, 2 gcra, 3 fixed_window, 4
--       sliding_window, 5 sliding_log), count, period in µs, burst, the
--       reduced rate l/p (l units per p µs), 1 if the rule needs
--       big-number arithmetic, else 0, and the definition
--       "alg:count:period:burst;". "batch" is "take" for limits of several
--       policies and keys at once, each with its own cost: the limits'
--       arguments are followed by one cost per limit, and n is ignored.
--       "charge" is followed by one argument per limit too (see below).
-- Returns {now, wait, then per limit: allowed, remaining, retry, reset};
-- cancel and charge return {now, 0}.

-- Exact integer arithmetic. Lua's numbers are doubles, exact only below
-- 2^53, and the algorithms multiply counts by periods. Two sets of the same
-- operations exist: plain numbers (arith.lua), for rules whose every
-- intermediate value stays below 2^52 (the store tells, per rule: nearly
-- all real rules), and big numbers (bignum.lua) for the rest. The
-- algorithms below are written once, on the set that use() chooses per
-- rule.
--[[clock.lua]]
--[[arith.lua]]
--[[bignum.lua]]

local plain = {
  big = function(x) return x end,
  zero = 0,
  mul = function(a, b) return a * b end,
  add = function(x, y) return x + y end,
  sub = function(x, y) return x - y end,
  subFloor = function(x, y) if x < y then return 0 end return x - y end,
  cmp = function(x, y) if x < y then return -1 elseif x > y then return 1 end return 0 end,
  isZero = function(x) return x == 0 end,
  divmod = divmod,
  divCeil = divCeil,
  debt = debt,
}
local wide = {big = bbig, zero = BZERO, mul = bmul, add = badd, sub = bsub, subFloor = bsubFloor,
  cmp = bcmp, isZero = bisZero, divmod = bdivmod, divCeil = bdivCeil, debt = bdebt}

-- The current set, chosen per rule by use(). From here on divmod, divCeil
-- and debt name the set's, not arith.lua's.
local big, ZERO, mul, add, sub, subFloor, cmp, isZero, divmod, divCeil, debt
local function use(set)
  big, ZERO, mul, add, sub, subFloor, cmp, isZero, divmod, divCeil, debt =
    set.big, set.zero, set.mul, set.add, set.sub, set.subFloor, set.cmp, set.isZero, set.divmod, set.divCeil, set.debt
end

local function fmt(x) return string.format('%.0f', x) end

-- The algorithms. A rule is {alg, count, period, burst, l, p, cap}; a
-- fixed-size state is {T, A, B} as in algo.State; a status is
-- {allowed, remaining, retry, reset}.
local TOKEN_BUCKET, GCRA, FIXED, SLIDING, LOG = 1, 2, 3, 4, 5

local function fresh(st) return st[1] == 0 and st[2] == 0 and st[3] == 0 end

-- owed returns the debt of a bucket in state st at now (algo.Rule.debt).
local function owed(r, st, now)
  return debt(r.alg, st[1], st[2], st[3], now, r.cap, r.l, r.p)
end

local function bucketState(r, d, now)
  if r.alg == GCRA then
    local q, frac = divmod(d, r.l)
    return {now + q, frac, 0}
  end
  if cmp(r.cap, d) < 0 then
    -- More debt than a bucket holds: anchor at the first whole µs at which
    -- it fits (see algo.Rule.state).
    local shift = divCeil(sub(d, r.cap), r.l)
    d = subFloor(d, mul(shift, r.l))
    now = now + shift
  end
  local used, rem = divmod(d, r.p)
  if rem == 0 then return {now, r.burst - used, 0} end
  return {now, r.burst - used - 1, r.p - rem}
end

local function evalBucket(r, st, now, n)
  local d = owed(r, st, now)
  local cost = n
  if n == 0 then cost = 1 end
  local room = sub(r.cap, mul(cost, r.p))
  local s = {cmp(d, room) <= 0, 0, 0, 0}
  if not s[1] then
    s[3] = divCeil(sub(d, room), r.l)
  elseif n > 0 then
    d = add(d, mul(n, r.p))
  end
  local used, rem = divmod(d, r.p)
  if rem ~= 0 then used = used + 1 end
  s[2] = math.max(r.burst - used, 0)
  s[4] = divCeil(d, r.l)
  if not s[1] or n == 0 then return s, nil end
  return s, bucketState(r, d, now)
end

local function bucketWait(r, st, now, n)
  local d = owed(r, st, now)
  local room = sub(r.cap, mul(n, r.p))
  if cmp(d, room) <= 0 then return 0 end
  return divCeil(sub(d, room), r.l)
end

-- Calendar windows (algo.CompileCalendar): the store computes the
-- boundaries of six consecutive periods around its own time, r.bounds, since
-- Lua has no time zone data; the decision's time must lie in the middle
-- three, so that its window, the one before and the one after are known.
local function cindex(r, t)
  local b = r.bounds
  for i = 1, #b - 1 do
    if b[i] <= t and t < b[i + 1] then return i end
  end
  return nil
end

-- span returns the window [start, stop) containing now, known being a window
-- start kept in the state (algo.Rule.span).
local function span(r, known, now)
  if r.bounds then
    local i = cindex(r, now)
    if not i or i < 2 or i > #r.bounds - 2 then
      error('sluice: the time is outside the calendar periods the store sent')
    end
    return r.bounds[i], r.bounds[i + 1]
  end
  local start = startFor(known, now, r.period)
  return start, start + r.period
end

-- endOf returns the end of the window starting at start; for a calendar
-- window the store did not send, the end kept in the state, stop.
local function endOf(r, start, stop)
  if r.bounds then
    local i = cindex(r, start)
    if i and i < #r.bounds then return r.bounds[i + 1] end
    return stop
  end
  return start + r.period
end

-- isPrev reports whether known starts the window before the one at start.
local function isPrev(r, known, start)
  if r.bounds then
    local i = cindex(r, start)
    return known ~= 0 and i ~= nil and i > 1 and r.bounds[i - 1] == known
  end
  return known + r.period == start
end

local function evalFixed(r, st, now, n)
  local start, stop = span(r, st[1], now)
  local count = 0
  if st[1] >= start then
    if st[1] ~= start then stop = endOf(r, st[1], st[4]) end
    start, count = st[1], st[2]
  end
  local cost = math.max(n, 1)
  local s = {count + cost <= r.count, 0, 0, 0}
  local next = nil
  if s[1] and n > 0 then
    count = count + n
    next = {start, count, 0}
  end
  if not s[1] then s[3] = stop - now end
  s[2] = r.count - count
  if count > 0 then s[4] = stop - now end
  return s, next
end

local function slidingRetry(r, start, stop, now, prev, cur, n)
  if cur + n > r.count then
    local nxt = endOf(r, stop, 0)
    local keep = divmod(mul(r.count - n, nxt - stop), cur)
    return nxt - now - keep
  end
  local keep = divmod(mul(r.count - cur - n, stop - start), prev)
  return stop - keep - now
end

local function evalSliding(r, st, now, n)
  local start, stop = span(r, st[1], now)
  local prev, cur = 0, 0
  if st[1] >= start then
    if st[1] ~= start then stop = endOf(r, st[1], st[4]) end
    start, prev, cur = st[1], st[2], st[3]
  elseif isPrev(r, st[1], start) then
    prev = st[3]
  end
  local P = stop - start
  local e = math.max(now - start, 0)
  local weighted = mul(prev, P - e)
  local limit = mul(r.count, P)
  local cost = math.max(n, 1)
  local used = add(weighted, mul(cur + cost, P))
  local s = {cmp(limit, used) >= 0, 0, 0, 0}
  local next = nil
  if s[1] and n > 0 then
    cur = cur + n
    next = {start, prev, cur}
  end
  if not s[1] then s[3] = slidingRetry(r, start, stop, now, prev, cur, cost) end
  s[2] = divmod(subFloor(limit, add(weighted, mul(cur, P))), P)
  if cur > 0 then
    s[4] = endOf(r, stop, st[5]) - now
  elseif prev > 0 then
    s[4] = stop - now
  end
  return s, next
end

-- now is the call's time in µs and slack pads its TTLs (see clock.lua),
-- both read in Main, just before the limits are.
local now, slack

-- A state key holds the definition that wrote it, "alg:count:period:burst;"
-- (the last of each limit's arguments), then the state. A state written
-- under another definition is carried to the limit's (carry.lua) and,
-- except by peek, stored so.
local carry
local function carried(r, v, now)
  carry = carry or (function()
--[[carry.lua]]
  end)()
  return carry(v, r.def, {r.alg, r.count, r.period, r.burst, r.l, r.p, r.bounds}, now, r.key, r.aux, slack, ARGV[1] ~= 'peek')
end

-- sliding_log keeps a sorted set of admitted requests (member "seq:cost",
-- score the time) in the auxiliary key and, in the state key after the
-- definition, sum and seq: the total cost and the last sequence number,
-- which makes members unique even within one microsecond. A log that peek
-- carries (writing nothing) is one entry of lg.one units at now.
local function loadLog(r, now)
  local meta = redis.call('GET', r.key)
  local lg = {sum = 0, seq = 0, live = 0}
  if meta then
    if #meta == #r.def + 16 and string.sub(meta, 1, #r.def) == r.def then
      lg.sum, lg.seq = struct.unpack('<dd', meta, #r.def + 1)
    else
      local mode, u, seq = carried(r, meta, now)
      if mode == 'keep' or ARGV[1] ~= 'peek' then
        if u > 0 then lg.sum, lg.seq = u, seq end
      else
        lg.one, lg.live = u, u
        return lg
      end
    end
  end
  -- Entries at or before now−period no longer count; they are removed only
  -- when a request is recorded, so that evaluating changes nothing.
  lg.live = lg.sum
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', r.aux, '-inf', fmt(now - r.period))) do
    lg.live = lg.live - tonumber(string.match(m, ':(%d+)$'))
  end
  return lg
end

local function evalLog(r, lg, now, n)
  local cost = math.max(n, 1)
  local s = {lg.live + cost <= r.count, 0, 0, 0}
  local used = lg.live
  if s[1] then
    used = used + n
  elseif lg.one then
    s[3] = r.period
  else
    local free = lg.live + cost - r.count
    local all = redis.call('ZRANGEBYSCORE', r.aux, '(' .. fmt(now - r.period), '+inf', 'WITHSCORES')
    for i = 1, #all, 2 do
      free = free - tonumber(string.match(all[i], ':(%d+)$'))
      if free <= 0 then
        s[3] = tonumber(all[i + 1]) + r.period - now
        break
      end
    end
  end
  s[2] = math.max(r.count - used, 0)
  if used > 0 then
    local newest = now
    local last
    if lg.one then
      last = {'', now}
    else
      last = redis.call('ZRANGE', r.aux, -1, -1, 'WITHSCORES')
    end
    if #last > 0 and lg.live > 0 then
      local t = tonumber(last[2])
      if s[1] and n > 0 then newest = math.max(newest, t) else newest = t end
    end
    s[4] = newest + r.period - now
  end
  return s
end

local function recordLog(r, lg, now, n, reset)
  if lg.live ~= lg.sum then
    redis.call('ZREMRANGEBYSCORE', r.aux, '-inf', fmt(now - r.period))
    lg.sum = lg.live
  end
  local at = now
  local last = redis.call('ZRANGE', r.aux, -1, -1, 'WITHSCORES')
  if #last > 0 then at = math.max(at, tonumber(last[2])) end
  lg.seq = lg.seq + 1
  lg.sum = lg.sum + n
  redis.call('ZADD', r.aux, fmt(at), fmt(lg.seq) .. ':' .. fmt(n))
  redis.call('PEXPIRE', r.aux, ttl(reset, slack))
  redis.call('SET', r.key, r.def .. struct.pack('<dd', lg.sum, lg.seq), 'PX', ttl(reset, slack))
end

-- A state is kept, after the definition, as three doubles,
-- struct.pack('<ddd'): every state value is an integer below 2^53.
-- plain.lua keeps the same form in the same keys. A calendar window's
-- state has two more: the end of its window and of the next, so that a
-- carry (carry.lua) can tell its windows without the calendar.
local function loadState(r, now)
  local v = redis.call('GET', r.key)
  if not v then return {0, 0, 0, 0, 0} end
  if r.bounds and #v == #r.def + 40 and string.sub(v, 1, #r.def) == r.def then
    return {struct.unpack('<ddddd', v, #r.def + 1)}
  end
  if not r.bounds and #v == #r.def + 24 and string.sub(v, 1, #r.def) == r.def then
    local a, b, c = struct.unpack('<ddd', v, #r.def + 1)
    return {a, b, c}
  end
  local a, b, c, d, e = carried(r, v, now)
  return {a, b, c, d or 0, e or 0}
end

local function saveState(r, st, reset)
  if r.bounds then
    local stop = endOf(r, st[1], 0)
    redis.call('SET', r.key, r.def .. struct.pack('<ddddd', st[1], st[2], st[3], stop, endOf(r, stop, 0)), 'PX', ttl(reset, slack))
    return
  end
  redis.call('SET', r.key, r.def .. struct.pack('<ddd', st[1], st[2], st[3]), 'PX', ttl(reset, slack))
end

local function eval(r, now, n)
  if r.alg == LOG then return evalLog(r, r.log, now, n), nil end
  if r.alg == FIXED then return evalFixed(r, r.st, now, n) end
  if r.alg == SLIDING then return evalSliding(r, r.st, now, n) end
  return evalBucket(r, r.st, now, n)
end

-- Main.
local op = ARGV[1]
local n = tonumber(ARGV[2])
now, slack = clock(ARGV[3])
local arg = tonumber(ARGV[4])
local nl = tonumber(ARGV[5])
local rules = {}
for i = 1, nl do
  local b = 5 + (i - 1) * 8
  local r = {
    alg = tonumber(ARGV[b + 1]), count = tonumber(ARGV[b + 2]), period = tonumber(ARGV[b + 3]),
    burst = tonumber(ARGV[b + 4]), l = tonumber(ARGV[b + 5]), p = tonumber(ARGV[b + 6]),
    set = plain, key = KEYS[2 * i - 1], aux = KEYS[2 * i], n = n, def = ARGV[b + 8],
  }
  -- A calendar window's period argument is "c" and its boundaries in µs,
  -- comma-separated.
  if string.sub(ARGV[b + 3], 1, 1) == 'c' then
    r.bounds = {}
    for x in string.gmatch(ARGV[b + 3], '%d+') do r.bounds[#r.bounds + 1] = tonumber(x) end
    r.period = r.bounds[#r.bounds] - r.bounds[1]
  end
  -- A batch (several policies and keys decided together) gives each limit
  -- its own cost, in the arguments after the limits'.
  if op == 'batch' then r.n = tonumber(ARGV[5 + nl * 8 + i]) end
  if ARGV[b + 7] == '1' then r.set = wide end
  use(r.set)
  r.cap = mul(r.burst, r.p)
  rules[i] = r
end

-- charge records what the store's fallback admitted while Redis was away
-- (see the store's tab), whatever the limits hold. Each limit's argument
-- after the limits' is "charge;floor": two lists of integers, either
-- empty. The charge: for a bucket n, n units of debt now (the debt those
-- units still leave); for a fixed window start, n, n units in the window
-- that started at start (µs), if it is the current one; for a sliding
-- window start, prev, cur, the counts of the window that started at start
-- and of the one before, to the same windows while they count; a window
-- that the store's clock has reached and Redis's not yet goes to Redis's
-- current one. For a sliding log at, n, at, n, ...: entries of n units at
-- µs at, if they still count. The floor, in the same form, is what the
-- fallback started from: written first if the limit holds nothing (Redis
-- lost or dropped the key meanwhile), so that its usage is not admitted
-- again.
local function ints(list)
  local v = {}
  for x in string.gmatch(list, '%d+') do v[#v + 1] = tonumber(x) end
  return v
end

-- charged returns st, a window's or bucket's state, charged with v; and
-- the µs until it is fresh, or nil if nothing counts.
local function charged(r, st, v)
  if r.alg == TOKEN_BUCKET or r.alg == GCRA then
    local d = add(owed(r, st, now), mul(v[1], r.p))
    if isZero(d) then return st, nil end
    return bucketState(r, d, now), divCeil(d, r.l)
  end
  -- The current window, as evalFixed and evalSliding find it.
  local start, stop = span(r, st[1], now)
  local prev, cur = 0, 0
  if st[1] >= start then
    if st[1] ~= start then stop = endOf(r, st[1], st[4]) end
    start, prev, cur = st[1], st[2], st[3]
  elseif r.alg == SLIDING and isPrev(r, st[1], start) then
    prev = st[3]
  end
  if r.alg == FIXED then
    -- prev is the window's count.
    if v[1] >= start then prev = prev + v[2] end
    if prev == 0 then return st, nil end
    return {start, prev, 0, st[4], st[5]}, stop - now
  end
  if v[1] > start then
    cur = cur + v[2] + v[3]
  elseif v[1] == start then
    prev, cur = prev + v[2], cur + v[3]
  elseif isPrev(r, v[1], start) then
    prev = prev + v[3]
  end
  if cur > 0 then return {start, prev, cur, st[4], st[5]}, endOf(r, stop, st[5]) - now end
  if prev > 0 then return {start, prev, cur, st[4], st[5]}, stop - now end
  return st, nil
end

if op == 'charge' then
  for i, r in ipairs(rules) do
    use(r.set)
    local list, floor = string.match(ARGV[5 + nl * 8 + i], '^([^;]*);?(.*)$')
    local v, f = ints(list), ints(floor)
    if r.alg == LOG then
      local lg = loadLog(r, now)
      if lg.sum == 0 then
        for j = 1, #f do v[#v + 1] = f[j] end
      end
      if lg.live ~= lg.sum then
        redis.call('ZREMRANGEBYSCORE', r.aux, '-inf', fmt(now - r.period))
        lg.sum = lg.live
      end
      local added = false
      for j = 1, #v - 1, 2 do
        if v[j] > now - r.period and v[j + 1] > 0 then
          lg.seq = lg.seq + 1
          lg.sum = lg.sum + v[j + 1]
          redis.call('ZADD', r.aux, fmt(v[j]), fmt(lg.seq) .. ':' .. fmt(v[j + 1]))
          added = true
        end
      end
      if added then
        local last = redis.call('ZRANGE', r.aux, -1, -1, 'WITHSCORES')
        local reset = tonumber(last[2]) + r.period - now
        redis.call('PEXPIRE', r.aux, ttl(reset, slack))
        redis.call('SET', r.key, r.def .. struct.pack('<dd', lg.sum, lg.seq), 'PX', ttl(reset, slack))
      end
    else
      local st, reset = loadState(r, now), nil
      if #f > 0 and fresh(st) then st, reset = charged(r, st, f) end
      if #v > 0 then
        local next, rs = charged(r, st, v)
        if rs then st, reset = next, rs end
      end
      if reset then saveState(r, st, reset) end
    end
  end
  return {now, 0}
end

if op == 'cancel' then
  if arg > now then
    for _, r in ipairs(rules) do
      use(r.set)
      local st = loadState(r, now)
      if not fresh(st) then
        local d = subFloor(owed(r, st, now), mul(n, r.p))
        if isZero(d) then
          redis.call('DEL', r.key)
        else
          saveState(r, bucketState(r, d, now), divCeil(d, r.l))
        end
      end
    end
  end
  return {now, 0}
end

for _, r in ipairs(rules) do
  if r.alg == LOG then r.log = loadLog(r, now) else r.st = loadState(r, now) end
end

local at, wait, commit = now, 0, op == 'take' or op == 'batch'
if op == 'peek' then
  n = 0
  for _, r in ipairs(rules) do r.n = 0 end
end
if op == 'reserve' then
  for _, r in ipairs(rules) do
    use(r.set)
    wait = math.max(wait, bucketWait(r, r.st, now, n))
  end
  if wait <= arg then
    at, commit = now + wait, true
  end
end

local out = {now, wait}
local all = true
for i, r in ipairs(rules) do
  use(r.set)
  local s, next = eval(r, at, r.n)
  r.status, r.next = s, next
  all = all and s[1]
  local j = 2 + (i - 1) * 4
  out[j + 1] = s[1] and 1 or 0
  out[j + 2] = s[2]
  out[j + 3] = s[3]
  out[j + 4] = s[4]
end
if all and commit and n > 0 then
  for _, r in ipairs(rules) do
    local reset = at - now + r.status[4]
    if r.alg == LOG then
      recordLog(r, r.log, at, r.n, reset)
    else
      saveState(r, r.next, reset)
    end
  end
end
return out

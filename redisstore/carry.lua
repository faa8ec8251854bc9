-- Carrying a limit's state to a new definition: the body of a function that
-- returns the carry function. The store puts this text into plain.lua and
-- sluice.lua, where it is built only when a decision finds a state written
-- under another definition, so that it costs the common path nothing. It
-- mirrors package algo's carrying, in exact integer arithmetic on "big"
-- numbers (as in sluice.lua), whatever either rule's bounds.
--
-- A state key holds the definition that wrote it, "alg:count:period:burst;"
-- (period in µs), followed by the state: three doubles {T, A, B} for
-- buckets and windows, two {sum, seq} for sliding_log, whose entries lie in
-- the auxiliary key. A calendar window's definition ends in "@" and a
-- digest of its calendar, "alg:count:period:burst@digest;" (period is its
-- longest), and its state has five doubles {T, A, B, E, N}: E is the end of
-- the window starting at T and N the end of the one after, so that the
-- state tells its windows without the calendar.
local floor = math.floor
local D = 67108864 -- 2^26
local D2 = D * D

local function big(x)
  local h = floor(x / D2)
  x = x - h * D2
  local m = floor(x / D)
  return {h, m, x - m * D}
end

local function mul(a, b)
  local a1 = floor(a / D)
  local a0 = a - a1 * D
  local b1 = floor(b / D)
  local b0 = b - b1 * D
  local lo = a0 * b0
  local mid = a1 * b0 + a0 * b1
  local hi = a1 * b1
  local lc = floor(lo / D)
  local mc = floor(mid / D)
  lo = lo - lc * D
  mid = mid - mc * D + lc
  local c = floor(mid / D)
  return {hi + mc + c, mid - c * D, lo}
end

local function add(x, y)
  local l = x[3] + y[3]
  local c = floor(l / D)
  local m = x[2] + y[2] + c
  local c2 = floor(m / D)
  return {x[1] + y[1] + c2, m - c2 * D, l - c * D}
end

local function cmp(x, y)
  for i = 1, 3 do
    if x[i] ~= y[i] then
      if x[i] < y[i] then return -1 end
      return 1
    end
  end
  return 0
end

-- sub returns x - y, or zero if y > x.
local function sub(x, y)
  if cmp(x, y) < 0 then return {0, 0, 0} end
  local l = x[3] - y[3]
  local m = x[2] - y[2]
  local h = x[1] - y[1]
  if l < 0 then l = l + D; m = m - 1 end
  if m < 0 then m = m + D; h = h - 1 end
  return {h, m, l}
end

local function isZero(x) return x[1] == 0 and x[2] == 0 and x[3] == 0 end

-- divmod returns floor(x/d) and x mod d for 0 < d < 2^52 and a quotient
-- below 2^52.
local function divmod(x, d)
  local q = floor((x[1] * D2 + x[2] * D + x[3]) / d)
  if q < 0 then q = 0 end
  local p = mul(q, d)
  while cmp(p, x) > 0 do
    q = q - 1
    p = mul(q, d)
  end
  local r = sub(x, p)
  local bd = big(d)
  while cmp(r, bd) >= 0 do
    q = q + 1
    r = sub(r, bd)
  end
  return q, r[1] * D2 + r[2] * D + r[3]
end

local function divCeil(x, d)
  local q, r = divmod(x, d)
  if r ~= 0 then q = q + 1 end
  return q
end

local function pdivmod(x, d)
  local q = floor(x / d)
  local r = x - q * d
  if r < 0 then
    q, r = q - 1, r + d
  elseif r >= d then
    q, r = q + 1, r - d
  end
  return q, r
end

local function gcd(a, b)
  while b ~= 0 do
    local _, r = pdivmod(a, b)
    a, b = b, r
  end
  return a
end

local function windowStart(at, period)
  local q = pdivmod(at, period)
  return q * period
end

local function ttl(us, slack)
  return math.max(math.ceil(us / 1000), 1) + slack
end

local function fmt(x) return string.format('%.0f', x) end

-- usage returns the units the state held in v (under from) holds at now,
-- a partly used unit counting as used; for buckets also the debt in ticks.
local function usage(from, v, at, now, aux)
  local alg, count, period, burst = from[1], from[2], from[3], from[4]
  if from.cal ~= '' and (alg == 3 or alg == 4) then
    if #v < at + 39 then return 0, {0, 0, 0} end
    local T, A, B, E, N = struct.unpack('<ddddd', v, at)
    local current = T > now or now < E
    if alg == 3 then
      if current then return A end
      return 0
    end
    local start, L, prev, cur = T, E - T, A, B
    if not current then
      if now >= N then return 0 end
      start, L, prev, cur = E, N - E, B, 0
    end
    local e = math.max(now - start, 0)
    return divCeil(add(mul(prev, L - e), mul(cur, L)), L)
  end
  if alg == 5 then
    local sum = 0
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', aux, '(' .. fmt(now - period), '+inf')) do
      sum = sum + tonumber(string.match(m, ':(%d+)$'))
    end
    return sum
  end
  if #v < at + 23 then return 0, {0, 0, 0} end
  local T, A, B = struct.unpack('<ddd', v, at)
  if T == 0 and A == 0 and B == 0 then return 0, {0, 0, 0} end
  if alg == 3 then
    if now < T + period or T > now then return A end
    return 0
  end
  if alg == 4 then
    local start = windowStart(now, period)
    if T <= now and now - T < period then
      start = T
    elseif T <= now and now - T < 2 * period then
      start = T + period
    end
    local prev, cur = 0, 0
    if T >= start then
      start, prev, cur = T, A, B
    elseif T + period == start then
      prev = B
    end
    local e = math.max(now - start, 0)
    return divCeil(add(mul(prev, period - e), mul(cur, period)), period)
  end
  local g = gcd(count, period)
  local l, p = count / g, period / g
  local d
  if alg == 2 then
    if T < now then return 0, {0, 0, 0} end
    d = add(mul(T - now, l), big(A))
  else
    local deficit = sub(mul(burst, p), add(mul(A, p), big(B)))
    if now >= T then
      d = sub(deficit, mul(now - T, l))
    else
      d = add(deficit, mul(T - now, l))
    end
  end
  return divCeil(d, p), d
end

-- carry returns the state held in v, written under another definition, as
-- the rule to = {alg, count, period, burst, l, p} (whose definition is def)
-- holds it at now: {T, A, B} for buckets and windows, zeros for a fresh
-- state; for sliding_log, "keep" (the entries in aux stay, with sum and
-- seq) or "one" (one entry of u units at now, none if u is 0). With write,
-- it also stores the carried state in key and aux with the new rule's TTL.
--
-- For a calendar window, to[7] holds the boundaries of the periods around
-- now (as sluice.lua has them), and the carried state has five values.
return function(v, def, to, now, key, aux, slack, write)
  local fa, fc, fp, fb, ftag = string.match(v, '^(%d+):(%d+):(%d+):(%d+)([^;:]*);')
  local from, at = nil, 0
  if fa then
    from = {tonumber(fa), tonumber(fc), tonumber(fp), tonumber(fb), cal = ftag}
    at = #fa + #fc + #fp + #fb + #ftag + 5
  end
  local alg, count, period, burst, l, p = to[1], to[2], to[3], to[4], to[5], to[6]
  local bounds, tag = to[7], string.match(def, '(@[^;]*);$') or ''
  -- cs, ce, cn: the calendar window containing now and the end of the next.
  local cs, ce, cn = 0, 0, 0
  if bounds then
    for i = 1, #bounds - 2 do
      if bounds[i] <= now and now < bounds[i + 1] then
        cs, ce, cn = bounds[i], bounds[i + 1], bounds[i + 2]
      end
    end
  end
  local E, N = 0, 0
  if alg == 5 then
    if from and from[1] == 5 and from[3] == period and #v >= at + 15 then
      -- Same period: the entries are kept as they are.
      local sum, seq = struct.unpack('<dd', v, at)
      if write then
        local ms = redis.call('PTTL', aux)
        if ms > 0 then
          redis.call('SET', key, def .. struct.pack('<dd', sum, seq), 'PX', ms)
        else
          redis.call('DEL', key)
          return 'one', 0, 1
        end
      end
      return 'keep', sum, seq
    end
    local u = 0
    if from then u = math.min(usage(from, v, at, now, aux), count) end
    if write then
      redis.call('DEL', aux)
      if u > 0 then
        redis.call('ZADD', aux, fmt(now), '1:' .. fmt(u))
        redis.call('PEXPIRE', aux, ttl(period, slack))
        redis.call('SET', key, def .. struct.pack('<dd', u, 1), 'PX', ttl(period, slack))
      else
        redis.call('DEL', key)
      end
    end
    return 'one', u, 1
  end

  local T, A, B, reset = 0, 0, 0, 0
  if from then
    local u, d = usage(from, v, at, now, aux)
    if alg <= 2 then
      if from[1] <= 2 and from[2] == count and from[3] == period then
        -- Only Burst changed: the debt is kept exactly, up to the new
        -- capacity.
        local cap = mul(burst, p)
        if cmp(d, cap) > 0 then d = cap end
      else
        d = mul(math.min(u, burst), p)
      end
      if not isZero(d) then
        if alg == 2 then
          local q, frac = divmod(d, l)
          T, A = now + q, frac
        else
          local used, rem = divmod(d, p)
          if rem == 0 then
            T, A = now, burst - used
          else
            T, A, B = now, burst - used - 1, p - rem
          end
        end
        reset = divCeil(d, l)
      end
    elseif bounds and alg == 4 and from[1] == 4 and from.cal == tag then
      -- The same calendar: prev and cur each capped at the new Count.
      T, A, B, E, N = struct.unpack('<ddddd', v, at)
      A, B = math.min(A, count), math.min(B, count)
      local stop, nxt, prev, cur = E, N, A, B
      if T < cs then
        stop, nxt, prev, cur = ce, cn, 0, 0
        if E == cs then prev = B end
      end
      if cur > 0 then
        reset = nxt - now
      elseif prev > 0 then
        reset = stop - now
      else
        T, A, B, E, N = 0, 0, 0, 0, 0
      end
    elseif bounds then
      u = math.min(u, count)
      if u > 0 then
        T, E, N = cs, ce, cn
        if alg == 3 then
          A, reset = u, ce - now
        else
          B, reset = u, cn - now
        end
      end
    elseif alg == 4 and from[1] == 4 and from[3] == period and from.cal == '' then
      -- Same period: prev and cur each capped at the new Count.
      T, A, B = struct.unpack('<ddd', v, at)
      A, B = math.min(A, count), math.min(B, count)
      local start = windowStart(now, period)
      if T <= now and now - T < period then
        start = T
      elseif T <= now and now - T < 2 * period then
        start = T + period
      end
      local prev, cur = 0, 0
      if T >= start then
        start, prev, cur = T, A, B
      elseif T + period == start then
        prev = B
      end
      if cur > 0 then
        reset = start + 2 * period - now
      elseif prev > 0 then
        reset = start + period - now
      else
        T, A, B = 0, 0, 0
      end
    else
      u = math.min(u, count)
      if u > 0 then
        T = windowStart(now, period)
        if alg == 3 then
          A, reset = u, T + period - now
        else
          B, reset = u, T + 2 * period - now
        end
      end
    end
  end
  if write then
    if from and from[1] == 5 then redis.call('DEL', aux) end
    if T == 0 and A == 0 and B == 0 then
      redis.call('DEL', key)
    elseif bounds then
      redis.call('SET', key, def .. struct.pack('<ddddd', T, A, B, E, N), 'PX', ttl(reset, slack))
    else
      redis.call('SET', key, def .. struct.pack('<ddd', T, A, B), 'PX', ttl(reset, slack))
    end
  end
  return T, A, B, E, N
end

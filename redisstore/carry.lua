-- Carrying a limit's state to a new definition: the body of a function that
-- returns the carry function. The store puts this text into plain.lua,
-- sluice.lua and quota.lua at their markers (see redisstore.go), where it is
-- built only when a decision finds a state written under another
-- definition, so that it costs the common path nothing. It mirrors package
-- algo's carrying, in exact integer arithmetic on big numbers (bignum.lua),
-- whatever either rule's bounds. It brings the pieces it uses, so that it
-- depends on no name of the script around it.
--
-- A state key holds the definition that wrote it, "alg:count:period:burst;"
-- (period in µs), followed by the state: three doubles {T, A, B} for
-- buckets and windows, two {sum, seq} for sliding_log, whose entries lie in
-- the auxiliary key. A calendar window's definition ends in "@" and a
-- digest of its calendar, "alg:count:period:burst@digest;" (period is its
-- longest), and its state has five doubles {T, A, B, E, N}: E is the end of
-- the window starting at T and N the end of the one after, so that the
-- state tells its windows without the calendar.
--[[clock.lua]]
--[[arith.lua]]
--[[bignum.lua]]

local function gcd(a, b)
  while b ~= 0 do
    local _, r = divmod(a, b)
    a, b = b, r
  end
  return a
end

-- usage returns the units the state held in v (under from) holds at now,
-- a partly used unit counting as used; for buckets also the debt in ticks.
local function usage(from, v, at, now, aux)
  local alg, count, period, burst = from[1], from[2], from[3], from[4]
  if from.cal ~= '' and (alg == 3 or alg == 4) then
    if #v < at + 39 then return 0, BZERO end
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
    return bdivCeil(badd(bmul(prev, L - e), bmul(cur, L)), L)
  end
  if alg == 5 then
    local sum = 0
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', aux, '(' .. string.format('%.0f', now - period), '+inf')) do
      sum = sum + tonumber(string.match(m, ':(%d+)$'))
    end
    return sum
  end
  if #v < at + 23 then return 0, BZERO end
  local T, A, B = struct.unpack('<ddd', v, at)
  if T == 0 and A == 0 and B == 0 then return 0, BZERO end
  if alg == 3 then
    if now < T + period or T > now then return A end
    return 0
  end
  if alg == 4 then
    local start = startFor(T, now, period)
    local prev, cur = 0, 0
    if T >= start then
      start, prev, cur = T, A, B
    elseif T + period == start then
      prev = B
    end
    local e = math.max(now - start, 0)
    return bdivCeil(badd(bmul(prev, period - e), bmul(cur, period)), period)
  end
  local g = gcd(count, period)
  local l, p = count / g, period / g
  local d = bdebt(alg, T, A, B, now, bmul(burst, p), l, p)
  return bdivCeil(d, p), d
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
        redis.call('ZADD', aux, string.format('%.0f', now), string.format('1:%.0f', u))
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
        local cap = bmul(burst, p)
        if bcmp(d, cap) > 0 then d = cap end
      else
        d = bmul(math.min(u, burst), p)
      end
      if not bisZero(d) then
        if alg == 2 then
          local q, frac = bdivmod(d, l)
          T, A = now + q, frac
        else
          local used, rem = bdivmod(d, p)
          if rem == 0 then
            T, A = now, burst - used
          else
            T, A, B = now, burst - used - 1, p - rem
          end
        end
        reset = bdivCeil(d, l)
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
      local start = startFor(T, now, period)
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
        T = startFor(0, now, period)
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

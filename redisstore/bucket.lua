-- Storing a bucket's debt, in plain numbers: a piece that the store puts
-- into a script at its marker (see redisstore.go), after clock.lua and
-- arith.lua. Only the scripts' paths that write a debt they did not just
-- admit need it (a refund, a lease), so plain.lua puts it inside its
-- cancel path, where it costs its other decisions nothing.

-- saveBucket stores in key, under the definition def, the state of a
-- bucket (alg 1 TokenBucket or 2 GCRA; Burst burst, cap Burst×p, rate l/p)
-- that owes d ticks at now, with the TTL of the time until the whole debt
-- is repaid; or deletes key if d is 0. A token bucket that owes more than
-- it holds (reservations still to come) is anchored at the first whole µs
-- at which its debt fits (algo.Rule.state); its key still lives until the
-- debt is repaid, not until that anchor's state would be.
local function saveBucket(key, def, alg, d, now, burst, cap, l, p, slack)
  if d == 0 then
    redis.call('DEL', key)
    return
  end
  local v
  if alg == 2 then
    local q, frac = divmod(d, l)
    v = def .. struct.pack('<ddd', now + q, frac, 0)
  else
    local at, fits = now, d
    if cap < d then
      local shift = divCeil(d - cap, l)
      at, fits = now + shift, math.max(d - shift * l, 0)
    end
    local used, rem = divmod(fits, p)
    if rem == 0 then
      v = def .. struct.pack('<ddd', at, burst - used, 0)
    else
      v = def .. struct.pack('<ddd', at, burst - used - 1, p - rem)
    end
  end
  redis.call('SET', key, v, 'PX', ttl(divCeil(d, l), slack))
end

-- Exact integer arithmetic on plain numbers: a piece that the store puts
-- into a script at its marker (see redisstore.go). Lua's numbers are doubles,
-- exact integers only below 2^53; these routines are exact while every
-- value stays below 2^52, which the store checks per rule (needsWide). The
-- same routines on big numbers are bignum.lua's, named with a b in front.

local floor = math.floor

-- divmod returns floor(x/d) and x mod d for integers 0 <= x < 2^52 and
-- 0 < d < 2^52: the quotient in floating point, corrected by one if the
-- division rounded across an integer.
local function divmod(x, d)
  local q = floor(x / d)
  local r = x - q * d
  if r < 0 then
    q, r = q - 1, r + d
  elseif r >= d then
    q, r = q + 1, r - d
  end
  return q, r
end

-- divCeil returns x/d rounded up, for x and d as divmod's.
local function divCeil(x, d)
  local q, r = divmod(x, d)
  if r ~= 0 then q = q + 1 end
  return q
end

-- startFor returns the start of the window of length period, aligned to
-- the Unix epoch, that contains at, without dividing when at falls in the
-- window starting at known or the next one (algo.Rule.startFor). A fresh
-- state's known is 0: startFor(0, at, period) is the window containing at.
local function startFor(known, at, period)
  if known <= at and at - known < period then return known end
  if known <= at and at - known < 2 * period then return known + period end
  local _, r = divmod(at, period)
  return at - r
end

-- debt returns a bucket's debt in ticks at time at (algo.Rule.debt): alg 1
-- is TokenBucket with state {last, tokens, fraction}, alg 2 GCRA with
-- {TAT, fraction}; cap is Burst×p, l/p the reduced rate. A fresh state
-- owes nothing.
local function debt(alg, T, A, B, at, cap, l, p)
  if T == 0 and A == 0 and B == 0 then return 0 end
  if alg == 2 then
    if T >= at then return (T - at) * l + A end
    return 0
  end
  if at >= T then return math.max(cap - (A * p + B) - (at - T) * l, 0) end
  return cap - (A * p + B) + (T - at) * l
end

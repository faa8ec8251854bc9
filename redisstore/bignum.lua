-- Exact integer arithmetic on big numbers: a piece that the store puts
-- into a script at its marker (see redisstore.go). Lua's numbers are doubles,
-- exact only below 2^53, and the algorithms multiply counts by periods: for
-- rules whose values may pass 2^52 (the store tells, per rule), a big
-- number is three digits {h, m, l} worth h*2^52 + m*2^26 + l with
-- 0 <= m, l < 2^26. Every input to bmul and bdivmod is a non-negative
-- integer below 2^52. No routine changes its arguments, so results may be
-- shared (BZERO). The same routines on plain numbers are arith.lua's.
local D = 67108864 -- 2^26
local D2 = D * D

local function bbig(x)
  local h = math.floor(x / D2)
  x = x - h * D2
  local m = math.floor(x / D)
  return {h, m, x - m * D}
end

local BZERO = {0, 0, 0}

local function bmul(a, b)
  local a1 = math.floor(a / D)
  local a0 = a - a1 * D
  local b1 = math.floor(b / D)
  local b0 = b - b1 * D
  local lo = a0 * b0
  local mid = a1 * b0 + a0 * b1
  local hi = a1 * b1
  local lc = math.floor(lo / D)
  local mc = math.floor(mid / D)
  lo = lo - lc * D
  mid = mid - mc * D + lc
  local c = math.floor(mid / D)
  return {hi + mc + c, mid - c * D, lo}
end

local function badd(x, y)
  local l = x[3] + y[3]
  local c = math.floor(l / D)
  local m = x[2] + y[2] + c
  local c2 = math.floor(m / D)
  return {x[1] + y[1] + c2, m - c2 * D, l - c * D}
end

local function bcmp(x, y)
  for i = 1, 3 do
    if x[i] ~= y[i] then
      if x[i] < y[i] then return -1 end
      return 1
    end
  end
  return 0
end

-- bsub returns x - y for x >= y.
local function bsub(x, y)
  local l = x[3] - y[3]
  local m = x[2] - y[2]
  local h = x[1] - y[1]
  if l < 0 then l = l + D; m = m - 1 end
  if m < 0 then m = m + D; h = h - 1 end
  return {h, m, l}
end

-- bsubFloor returns x - y, or zero if y > x.
local function bsubFloor(x, y)
  if bcmp(x, y) < 0 then return BZERO end
  return bsub(x, y)
end

local function bisZero(x) return x[1] == 0 and x[2] == 0 and x[3] == 0 end

-- bdivmod returns floor(x/d) and x mod d for 0 < d < 2^52 and a quotient
-- below 2^52: an estimate in floating point, corrected exactly.
local function bdivmod(x, d)
  local q = math.floor((x[1] * D2 + x[2] * D + x[3]) / d)
  if q < 0 then q = 0 end
  local p = bmul(q, d)
  while bcmp(p, x) > 0 do
    q = q - 1
    p = bmul(q, d)
  end
  local r = bsub(x, p)
  local bd = bbig(d)
  while bcmp(r, bd) >= 0 do
    q = q + 1
    r = bsub(r, bd)
  end
  return q, r[1] * D2 + r[2] * D + r[3]
end

-- bdivCeil returns x/d rounded up, for x and d as bdivmod's.
local function bdivCeil(x, d)
  local q, r = bdivmod(x, d)
  if r ~= 0 then q = q + 1 end
  return q
end

-- bdebt is arith.lua's debt with a big cap and a big result.
local function bdebt(alg, T, A, B, at, cap, l, p)
  if T == 0 and A == 0 and B == 0 then return BZERO end
  if alg == 2 then
    if T >= at then return badd(bmul(T - at, l), bbig(A)) end
    return BZERO
  end
  local deficit = bsubFloor(cap, badd(bmul(A, p), bbig(B)))
  if at >= T then return bsubFloor(deficit, bmul(at - T, l)) end
  return badd(deficit, bmul(T - at, l))
end

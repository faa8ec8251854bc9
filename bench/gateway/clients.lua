-- Each request comes from another client (X-Forwarded-For, believed from
-- 127.0.0.1) with another API key, so that the quickstart rules admit
-- every request and the benchmark measures admitted, proxied requests.
local n = 0
request = function()
  n = n + 1
  local ip = "10." .. (n % 250) .. "." .. (math.floor(n / 250) % 250) .. "." .. (math.floor(n / 62500) % 250 + 1)
  return wrk.format("GET", "/api/search?q=x", { ["X-API-Key"] = "key-" .. (n % 200000), ["X-Forwarded-For"] = ip })
end

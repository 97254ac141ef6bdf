-- The request script benchmarks/wrk.py runs wrk with. The arguments after
-- "--" are key=value pairs:
--   threads=N      how many threads wrk runs (a thread's share of the jobs)
--   tokens=FILE    buyers' tokens, one a line: each request carries one at random
--   bodies=FILE    the JSON bodies to post, one a line (SKUs spread over a
--                  cluster's masters): each thread's requests take them in turn
--   prefix=P       each request's Idempotency-Key is P-<thread>-<n>, unique
--   stop_at=S      stop sending at S seconds of /proc/uptime, then wait for
--                  every answer: the phase ends with nothing in flight
--   orders=FILE    record "<order_id> <sku_id>" of every 202 in FILE (one a line)
--   jobs=FILE      instead of the above: a fixed list of requests, one a line
--                  "METHOD PATH TOKEN"; thread i sends lines i, i+N, ... once
-- A thread that has sent its share and read every answer prints "WRK drained"
-- and stops; wrk.py then ends wrk (its main thread sleeps the whole -d). done()
-- prints the figures on "WRK" lines for wrk.py, with the count of every
-- status code.

local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

local function lines(path)
  local out = {}
  for line in io.lines(path) do
    if #line > 0 then out[#out + 1] = line end
  end
  return out
end

local function uptime()
  local f = io.open("/proc/uptime", "r")
  local s = f:read("*n")
  f:close()
  return s
end

function init(args)
  local opt = {}
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    opt[k] = v
  end
  local n = tonumber(opt.threads or "1")
  sent, received, claimed, checks, started, finished = 0, 0, 0, 0, false, false
  statuses, orders, closed = {}, {}, 0
  orders_path = opt.orders
  stop_at = tonumber(opt.stop_at or "")
  if opt.jobs then
    -- this thread's share, pre-formatted: request() only hands them out
    jobs = {}
    local i = 0
    for _, line in ipairs(lines(opt.jobs)) do
      i = i + 1
      if (i - 1) % n == id - 1 then
        local method, path, token = line:match("^(%S+) (%S+) (%S+)$")
        jobs[#jobs + 1] = wrk.format(method, path, {["Authorization"] = "Token " .. token}, "")
      end
    end
  else
    tokens = {}
    for _, t in ipairs(lines(opt.tokens)) do tokens[#tokens + 1] = "Token " .. t end
    bodies = lines(opt.bodies)
    prefix = opt.prefix .. "-" .. id .. "-"
  end
  math.randomseed(id * 7919)
end

local function post(n)
  return wrk.format("POST", nil, {
    ["Authorization"] = tokens[math.random(#tokens)],
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. n,
  }, bodies[n % #bodies + 1])
end

local function drained()
  -- everything sent has been answered and nothing more will be sent
  if finished and received >= claimed and not said then
    said = true
    io.write("WRK drained\n")
    io.stdout:flush()
    wrk.thread:stop()
  end
end

local function past_end()
  if jobs then return claimed >= #jobs end
  if not stop_at then return false end
  -- /proc/uptime, the clock wrk.py set stop_at by, read every 16th request
  checks = checks + 1
  return checks % 16 == 0 and uptime() >= stop_at
end

function delay()
  -- called before every request (wrk's delay hook): 0 sends at once; past the
  -- end this connection is parked for longer than wrk runs and the thread
  -- waits for the answers it is owed. A request is counted (claimed) here, not
  -- in request(): several connections may pass this point before the first of
  -- them sends.
  started = true
  if not finished then
    finished = past_end()
    if not finished then
      claimed = claimed + 1
      return 0
    end
  end
  drained()
  return 86400000
end

function request()
  -- wrk calls this once before the run to check the script: that one is not sent
  if not started then
    return jobs and (jobs[1] or "") or post(0)
  end
  sent = sent + 1
  if jobs then
    -- a connection wrk reopened after an error sends without asking delay():
    -- past the list it repeats the last job (answered, and counted, again)
    return jobs[math.min(sent, #jobs)]
  end
  return post(sent)
end

function response(status, headers, body)
  received = received + 1
  statuses[status] = (statuses[status] or 0) + 1
  if orders_path and status == 202 then
    local oid = body:match('"order_id"%s*:%s*"([^"]+)"')
    if oid then orders[#orders + 1] = oid .. " " .. (body:match('"sku_id"%s*:%s*"([^"]+)"') or "?") end
  end
  -- a body that ends when the server closes (no length, not chunked): wrk
  -- counts the close as a read error, wrk.py takes it back out of the errors
  if not (headers["Content-Length"] or headers["content-length"] or headers["Transfer-Encoding"]
          or headers["transfer-encoding"]) then
    closed = closed + 1
  end
  drained()
end

function done(summary, latency, requests)
  local e = summary.errors
  local total, closes, path, ids = {}, 0, nil, {}
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do total[code] = (total[code] or 0) + n end
    closes = closes + t:get("closed")
    path = path or t:get("orders_path")
    if path then
      for _, oid in ipairs(t:get("orders")) do ids[#ids + 1] = oid end
    end
  end
  if path then
    local f = assert(io.open(path, "w"))
    f:write(table.concat(ids, "\n"), "\n")
    f:close()
  end
  io.write(string.format(
    "WRK requests=%d duration_us=%d p50_us=%d p99_us=%d connect=%d read=%d write=%d timeout=%d status=%d closed=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.timeout, e.status, closes))
  for code, n in pairs(total) do io.write(string.format("WRK code %d %d\n", code, n)) end
end

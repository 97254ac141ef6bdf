-- The request script benchmarks/wrk.py runs wrk with: every request carries a
-- buyer's token (drawn from the benchmark's buyers) and an Idempotency-Key no
-- other request has, and posts the phase's JSON body. The arguments after
-- "--": tokens file (one a line), body file, key prefix. done() prints the
-- figures on "WRK" lines for wrk.py, with the count of every status code.

local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  tokens = {}
  for line in io.lines(args[1]) do
    if #line > 0 then tokens[#tokens + 1] = "Token " .. line end
  end
  local f = assert(io.open(args[2], "rb"))
  body = f:read("*a")
  f:close()
  prefix = args[3] .. "-" .. id .. "-"
  sent = 0
  statuses = {}
  math.randomseed(id * 7919)
end

function request()
  sent = sent + 1
  return wrk.format("POST", nil, {
    ["Authorization"] = tokens[math.random(#tokens)],
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. sent,
  }, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK requests=%d duration_us=%d p50_us=%d p99_us=%d connect=%d read=%d write=%d timeout=%d status=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.timeout, e.status))
  local total = {}
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do total[code] = (total[code] or 0) + n end
  end
  for code, n in pairs(total) do io.write(string.format("WRK code %d %d\n", code, n)) end
end

-- The comparison peer, for the benchmark only: a per-request fixed window of
-- the kind LiteLLM's proxy runs (its v3 "batch rate limiter"): for each
-- (window start, counter) key pair, start a new window when the old one has
-- run out, else count one more; the caller compares the counters with its
-- limits and adds the response's tokens afterwards with INCRBY.
-- KEYS: window1, counter1, window2, counter2, ...   ARGV[1] now (s, caller's clock)   ARGV[2] window (s)
-- Returns {window start, count} per pair.
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS, 2 do
  local start = redis.call('GET', KEYS[i])
  if not start or now - tonumber(start) >= window then
    redis.call('SET', KEYS[i], tostring(now), 'EX', window)
    redis.call('SET', KEYS[i + 1], 1, 'EX', window)
    out[#out + 1] = tostring(now)
    out[#out + 1] = 1
  else
    out[#out + 1] = start
    out[#out + 1] = redis.call('INCR', KEYS[i + 1])
  end
end
return out

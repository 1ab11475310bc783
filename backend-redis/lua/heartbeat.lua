-- Keeps a live process's concurrency slots from expiring.
-- KEYS[1] concurrency slots   KEYS[2] state hash
-- ARGV[1] TTL (us)   then per slot held, 2 values: its id, the state epoch it was taken under
-- A slot of the state's epoch is refreshed only if still there (XX: one
-- released meanwhile is not brought back). A slot of an older epoch, or of
-- a state since lost, is in flight but no longer counted: it is added
-- again. Returns the state's epoch ("" if it has none yet).
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
local epoch = redis.call('HGET', KEYS[2], 'epoch') or ''
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == epoch then
    redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
  else
    redis.call('ZADD', KEYS[1], expiry, ARGV[i])
  end
end
return epoch

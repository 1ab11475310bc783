-- Keeps a live process's concurrency slots from expiring.
-- KEYS[1] concurrency slots   ARGV[1] TTL (us)   ARGV[2..] slot ids held
-- XX: a slot released meanwhile (or lost with the state) is not brought back.
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
local refreshed = 0
for i = 2, #ARGV do
  refreshed = refreshed + redis.call('ZADD', KEYS[1], 'XX', 'CH', expiry, ARGV[i])
end
return refreshed

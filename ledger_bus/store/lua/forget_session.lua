-- Drop a session from the index of sessions with open attempts, unless one opened since.
--
-- KEYS[1]  lb:open-sessions:{lb-NN}   sorted set: session -> when an attempt last opened (ms)
-- ARGV[1]  session id
-- ARGV[2]  drop only if the last opening is before this (ms)
--
-- Returns 1 when dropped. The caller has just seen the session with no open attempt; an append
-- that opens one refreshes the score first, so a fresh score means: look again next pass.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) < tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0

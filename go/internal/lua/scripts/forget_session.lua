-- Drop a session from the index of sessions with open attempts, unless one opened since.
--
-- KEYS[1]  lb:open-sessions:{lb-NN}   sorted set: session -> when an attempt last opened (ms);
--                                     also "<session>\31<token>", an append's provisional entry
--                                     (RedisStore._list_open_session) its writer never settled
-- ARGV[1]  session id
-- ARGV[2]  drop only if the last opening is before this (ms)
-- ARGV[3]  a ZSCAN pattern matching the session's provisional entries (the id glob-escaped)
--
-- Returns 1 when dropped. The caller has just seen the session with no open attempt; an append
-- that opens one refreshes the score first, so a fresh score means: look again next pass.

local before = tonumber(ARGV[2])
local members = {}
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score then
  if tonumber(score) >= before then return 0 end
  members[1] = ARGV[1]
end
-- Provisional entries are few (one a writer that died between its listing and its append), and
-- a bucket holds only the sessions with attempts open.
local cursor = '0'
repeat
  local page = redis.call('ZSCAN', KEYS[1], cursor, 'MATCH', ARGV[3], 'COUNT', 1000)
  cursor = page[1]
  for i = 1, #page[2], 2 do
    if tonumber(page[2][i + 1]) >= before then return 0 end
    members[#members + 1] = page[2][i]
  end
until cursor == '0'
if #members == 0 then return 0 end
redis.call('ZREM', KEYS[1], unpack(members))
return 1

-- Append events to one stream of a session: idempotency, then expected version, then all writes.
--
-- KEYS[1]  lb:{S}:log           session log; entry id = commit cursor; fields s, v, p
-- KEYS[2]  lb:{S}:meta          hash: stream name -> version
-- KEYS[3]  lb:{S}:s:<stream>    stream index, one entry per append: id <first version>-0,
--                               fields c = cursor of its first event, n = number of events
-- KEYS[4]  lb:{S}:idem:<stream> hash: append_id -> "<digest> <first> <last> <cursor>"
-- ARGV[1]  stream name
-- ARGV[2]  expected version, or -1 for any
-- ARGV[3]  append_id
-- ARGV[4]  sha256 hex of the RFC 8785 bytes of the events as given
-- ARGV[5..] one msgpack payload per event, never decoded here
--
-- Returns {"ok", first, last, cursor}, {"dup", first, last, cursor}, {"idem"} or
-- {"conflict", actual version}. Nothing is written unless the reply is "ok".
-- An append's events are consecutive in the session log (this script runs alone), which is what
-- lets the stream index hold one entry per append.

local prior = redis.call('HGET', KEYS[4], ARGV[3])
if prior then
  local digest, first, last, cursor = string.match(prior, '^(%S+) (%d+) (%d+) (%S+)$')
  if digest == ARGV[4] then
    return {'dup', tonumber(first), tonumber(last), cursor}
  end
  return {'idem'}
end

local version = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local expected = tonumber(ARGV[2])
if expected >= 0 and expected ~= version then
  return {'conflict', version}
end

local first = version + 1
local first_cursor, cursor
for i = 5, #ARGV do
  version = version + 1
  cursor = redis.call('XADD', KEYS[1], '*', 's', ARGV[1], 'v', version, 'p', ARGV[i])
  first_cursor = first_cursor or cursor
end
redis.call('XADD', KEYS[3], first .. '-0', 'c', first_cursor, 'n', version - first + 1)
redis.call('HSET', KEYS[2], ARGV[1], version)
redis.call('HSET', KEYS[4], ARGV[3], ARGV[4] .. ' ' .. first .. ' ' .. version .. ' ' .. cursor)
return {'ok', first, version, cursor}

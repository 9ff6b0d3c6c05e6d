-- Delete one stream's events from its session, a bounded number of appends per call (spec 3.9).
--
-- KEYS[1]  lb:{S}:log     KEYS[2]  lb:{S}:meta    KEYS[3]  lb:{S}:s:<stream>
-- KEYS[4]  lb:{S}:open    KEYS[5]  lb:{S}:tomb
-- ARGV[1]  stream name    ARGV[2]  how many appends to delete in this call, at most
-- ARGV[3]  now (ms)
-- The artifacts the deleted events referenced (the stream index lists them) lose those
-- references, and go with the last: lb:{S}:arts and lb:{S}:art:<sha256>, in the session's slot.
--
-- Returns {"more", events deleted} while the stream index still lists appends (call again),
-- {"done", events deleted, generation} once the stream is gone, or {"none", generation} when it
-- holds no event. Each call is atomic and the work is kept in the index itself, so a caller that
-- dies between calls leaves a shorter stream that the next call goes on deleting. The append_id
-- records stay, as in delete_session.lua.

if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return {'none', tonumber(redis.call('HGET', KEYS[5], 'generation') or '0')}
end
local deleted = 0
local arts = string.sub(KEYS[5], 1, -5) .. 'art'  -- lb:{S}:tomb -> lb:{S}:art
-- What a consumer group holds of the deleted events is acknowledged with them, so that no group
-- counts as pending an event that is gone.
local groups = {}
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    for i = 1, #group, 2 do
      if group[i] == 'name' then groups[#groups + 1] = group[i + 1] end
    end
  end
end
for _, append in ipairs(redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', tonumber(ARGV[2]))) do
  local fields = {}
  for i = 1, #append[2], 2 do fields[append[2][i]] = append[2][i + 1] end
  -- An append's events are consecutive in the log (append.lua runs alone).
  local ids = {}
  for _, entry in ipairs(redis.call('XRANGE', KEYS[1], fields['c'], '+', 'COUNT', fields['n'])) do
    ids[#ids + 1] = entry[1]
  end
  if #ids > 0 then
    for _, group in ipairs(groups) do redis.call('XACK', KEYS[1], group, unpack(ids)) end
    deleted = deleted + redis.call('XDEL', KEYS[1], unpack(ids))
  end
  if fields['a'] then
    for sha, count in string.gmatch(fields['a'], '(%x+):(%d+)') do
      if redis.call('HINCRBY', arts .. 's', sha, -tonumber(count)) <= 0 then
        redis.call('HDEL', arts .. 's', sha)
        redis.call('UNLINK', arts .. ':' .. sha)
      end
    end
  end
  redis.call('XDEL', KEYS[3], append[1])
end
if redis.call('XLEN', KEYS[3]) > 0 then return {'more', deleted} end

redis.call('UNLINK', KEYS[3])
redis.call('HDEL', KEYS[2], ARGV[1])
-- A bound goes with its stream, and what it kept of trimmed appends to the append_ids, which
-- stay as every deleted append's do (spec 3.12).
redis.call('HDEL', string.sub(arts, 1, -4) .. 'bounds', ARGV[1])
redis.call('UNLINK', string.sub(arts, 1, -4) .. 't:' .. ARGV[1])
local open = redis.call('HGETALL', KEYS[4])
for i = 1, #open, 2 do
  -- <run>\31<tool>\31<stream>\31<cursor>\31<flag>
  local stream = string.match(open[i + 1], '^[^\31]*\31[^\31]*\31([^\31]*)\31')
  if stream == ARGV[1] then redis.call('HDEL', KEYS[4], open[i]) end
end
local generation = redis.call('HINCRBY', KEYS[5], 'generation', 1)
redis.call('HSET', KEYS[5], 'deleted_ms', ARGV[3], 'stream:' .. ARGV[1], 1)
return {'done', deleted, generation}

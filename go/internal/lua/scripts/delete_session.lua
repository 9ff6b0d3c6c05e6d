-- Delete a session's events and everything kept of them, but what idempotency needs (spec 3.9).
-- KEYS[5], the tombstone, keeps the generation, the time, and `stream:<name>` for each stream
-- whose append_id records outlive its events.
--
-- KEYS[1]  lb:{S}:log     KEYS[2]  lb:{S}:meta    KEYS[3]  lb:{S}:open
-- KEYS[4]  lb:{S}:safe    KEYS[5]  lb:{S}:tomb
-- KEYS[6 .. 5+m]          lb:{S}:s:<stream>, one per stream the caller found in meta
-- KEYS[6+m ..]            lb:{S}:dead:<group>, one per consumer group the caller found
-- ARGV[1]  now (ms)       ARGV[2]  m, the number of streams
-- ARGV[3 .. 2+m]          the stream names, in the order of their keys
--
-- Returns {"ok", events deleted, generation}, {"none", generation} when the session holds no
-- event, or {"changed"} when a stream or group appeared since the caller looked: look again.
-- The append_id records (lb:{S}:idem:<stream>) stay, so a late retry of an old append returns
-- its original result instead of writing its events again.

local m = tonumber(ARGV[2])
if redis.call('HLEN', KEYS[2]) ~= m then return {'changed'} end
for i = 1, m do
  if redis.call('HEXISTS', KEYS[2], ARGV[2 + i]) == 0 then return {'changed'} end
end
local groups = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  groups = #redis.call('XINFO', 'GROUPS', KEYS[1])
end
if groups ~= #KEYS - 5 - m then return {'changed'} end

local events = redis.call('XLEN', KEYS[1])
if m == 0 and events == 0 then
  return {'none', tonumber(redis.call('HGET', KEYS[5], 'generation') or '0')}
end
local last = nil
if redis.call('EXISTS', KEYS[1]) == 1 then
  last = redis.call('XINFO', 'STREAM', KEYS[1])
end
for i = 1, #KEYS do
  if i ~= 5 then redis.call('UNLINK', KEYS[i]) end
end
-- The artifacts (spec 3.11), which lb:{S}:arts lists, in the session's slot.
local arts = string.sub(KEYS[5], 1, -5) .. 'art'  -- lb:{S}:tomb -> lb:{S}:art
for _, sha in ipairs(redis.call('HKEYS', arts .. 's')) do
  redis.call('UNLINK', arts .. ':' .. sha)
end
redis.call('UNLINK', arts .. 's')
-- Bounded streams (spec 3.12): their bounds, and what they keep of trimmed appends.
redis.call('UNLINK', string.sub(arts, 1, -4) .. 'bounds')
for i = 1, m do
  redis.call('UNLINK', string.sub(arts, 1, -4) .. 't:' .. ARGV[2 + i])
end
if last then
  -- An empty log that remembers its last id: what is written next takes later cursors, so a
  -- mirror or a link that holds an old cursor never meets a new event below it.
  local last_id
  for i = 1, #last, 2 do
    if last[i] == 'last-generated-id' then last_id = last[i + 1] end
  end
  if last_id and last_id ~= '0-0' then
    redis.call('XADD', KEYS[1], last_id, 'x', '')
    redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
  end
end
local generation = redis.call('HINCRBY', KEYS[5], 'generation', 1)
redis.call('HSET', KEYS[5], 'deleted_ms', ARGV[1])
for i = 1, m do
  -- The stream's append_id records stay: the tombstone names it, so they can still be found.
  redis.call('HSET', KEYS[5], 'stream:' .. ARGV[2 + i], 1)
end
return {'ok', events, generation}

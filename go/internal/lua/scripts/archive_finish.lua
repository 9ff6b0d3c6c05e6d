-- The last step of archiving a session (ledger_bus/operations/archiving.py): once its events and append_id
-- records are in the archive and verified there, remove everything of it here but the tombstone,
-- which names the archive from now on.
--
-- KEYS[1]  lb:{S}:log     KEYS[2]  lb:{S}:meta    KEYS[3]  lb:{S}:open
-- KEYS[4]  lb:{S}:safe    KEYS[5]  lb:{S}:tomb
-- KEYS[6 .. 5+m]          lb:{S}:s:<stream>, one per stream the caller found in meta
-- KEYS[6+m ..]            the session's other keys: lb:{S}:idem:<stream> (live and deleted
--                         streams) and lb:{S}:dead:<group>, one per group the caller found
-- ARGV[1]  now (ms)       ARGV[2]  m, the number of streams
-- ARGV[3]  the number of events verified in the archive
-- ARGV[4]  the archive the caller copied to
-- ARGV[5]  the number of consumer groups among KEYS[6+m ..]
-- ARGV[6 .. 5+m]          the stream names, in the order of their keys
--
-- Returns {"ok"}, {"done"} when it was finished before, {"moved", where} when the archive
-- under way is another, or {"changed"} when what the caller found is no longer so (look again).

local tomb = redis.call('HMGET', KEYS[5], 'archive', 'archived_ms')
if tomb[1] ~= ARGV[4] then return {'moved', tomb[1] or ''} end
if tomb[2] then return {'done'} end
local m = tonumber(ARGV[2])
if redis.call('HLEN', KEYS[2]) ~= m then return {'changed'} end
for i = 1, m do
  if redis.call('HEXISTS', KEYS[2], ARGV[5 + i]) == 0 then return {'changed'} end
end
if redis.call('XLEN', KEYS[1]) ~= tonumber(ARGV[3]) then return {'changed'} end
local groups = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  groups = #redis.call('XINFO', 'GROUPS', KEYS[1])
end
if groups ~= tonumber(ARGV[5]) then return {'changed'} end

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
  redis.call('UNLINK', string.sub(arts, 1, -4) .. 't:' .. ARGV[5 + i])
end
local fields = redis.call('HKEYS', KEYS[5])
for _, field in ipairs(fields) do
  if string.sub(field, 1, 7) == 'stream:' then redis.call('HDEL', KEYS[5], field) end
end
redis.call('HSET', KEYS[5], 'archived_ms', ARGV[1])
return {'ok'}

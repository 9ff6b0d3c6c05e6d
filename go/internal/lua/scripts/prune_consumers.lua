-- Remove a group's consumers that are idle and hold nothing pending, in one step: a consumer
-- that reads between a look at XINFO and XGROUP DELCONSUMER would lose its pending entries.
--
-- KEYS[1]  lb:{S}:log   the session log the group reads
-- ARGV[1]  group name
-- ARGV[2]  remove consumers idle at least this long (ms)
--
-- Returns the names removed.

local removed = {}
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #consumer, 2 do
    info[consumer[i]] = consumer[i + 1]
  end
  if tonumber(info['pending']) == 0 and tonumber(info['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed[#removed + 1] = info['name']
  end
end
return removed

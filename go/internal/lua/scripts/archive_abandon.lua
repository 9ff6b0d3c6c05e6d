-- Give up an archive that has not finished (ledger_bus/operations/archiving.py): the session takes appends
-- again, here. One that has finished is left as it is.
--
-- KEYS[1]  lb:{S}:tomb    ARGV[1]  the archive that was under way
--
-- Returns 1 when given up, 0 when there was nothing to give up.

local tomb = redis.call('HMGET', KEYS[1], 'archive', 'archived_ms')
if tomb[1] == ARGV[1] and not tomb[2] then
  redis.call('HDEL', KEYS[1], 'archive')
  return 1
end
return 0

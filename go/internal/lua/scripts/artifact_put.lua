-- Give an artifact written a chunk at a time its name (spec 3.11), once all of it is there.
--
-- KEYS[1]  lb:{S}:art:<sha256>:<token>   the upload: a hash of chunks "0", "1", ..., with a TTL
-- KEYS[2]  lb:{S}:art:<sha256>           the artifact
-- ARGV[1]  the artifact's size           ARGV[2]  its number of chunks
--
-- Returns 1 when the artifact is there, 0 when the upload is short (write it again). The
-- artifact keeps the upload's TTL until an append references it (append.lua makes it persist),
-- so the artifacts of appends that never commit go by themselves. One that is there already is
-- left as it is: the same name is the same bytes.

local chunks = tonumber(ARGV[2])
local whole = redis.call('HLEN', KEYS[1]) == chunks
if whole then
  local size = 0
  for i = 0, chunks - 1 do size = size + redis.call('HSTRLEN', KEYS[1], tostring(i)) end
  whole = size == tonumber(ARGV[1])
end
if not whole then
  redis.call('UNLINK', KEYS[1])
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('UNLINK', KEYS[1])
else
  redis.call('RENAME', KEYS[1], KEYS[2])
end
return 1

-- Give an artifact written a chunk at a time its name (spec 3.11), once all of it is there.
--
-- KEYS[1]  lb:{S}:art:<sha256>:<token>   the upload, with a TTL
-- KEYS[2]  lb:{S}:art:<sha256>           the artifact
-- ARGV[1]  the artifact's size
--
-- Returns 1 when the artifact is there, 0 when the upload is short (write it again). The
-- artifact keeps the upload's TTL until an append references it (append.lua makes it persist),
-- so the artifacts of appends that never commit go by themselves. One that is there already is
-- left as it is: the same name is the same bytes.

if redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[1]) then
  redis.call('UNLINK', KEYS[1])
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('UNLINK', KEYS[1])
else
  redis.call('RENAME', KEYS[1], KEYS[2])
end
return 1

-- Read events of one stream by version: the index gives cursors, the session log the payloads.
--
-- KEYS[1]  lb:{S}:s:<stream>    stream index; entry <version>-0, field c = cursor
-- KEYS[2]  lb:{S}:log           session log; fields s, v, p
-- ARGV[1]  first version wanted
-- ARGV[2]  how many at most
--
-- Returns a flat list: version, cursor, payload, version, cursor, payload, ...

local index = redis.call('XRANGE', KEYS[1], ARGV[1] .. '-0', '+', 'COUNT', ARGV[2])
local out = {}
for _, entry in ipairs(index) do
  local cursor = entry[2][2]
  local found = redis.call('XRANGE', KEYS[2], cursor, cursor)
  local fields = found[1][2]
  out[#out + 1] = fields[4]
  out[#out + 1] = cursor
  out[#out + 1] = fields[6]
end
return out

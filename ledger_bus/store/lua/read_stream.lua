-- A stream's events from a version on, in one call: the stream index says which appends hold
-- the versions wanted and where each one's events lie, consecutive, in the session log; the log
-- gives them. Read only: it runs with the caller's rights, and entries never change once
-- written, so the result is what the two reads made one after the other would return.
--
-- KEYS[1]  lb:{S}:s:<stream>        the stream index: an entry "<first version>-0" per append,
--                                 with c (its first cursor in the log) and n (its events)
-- KEYS[2]  lb:{S}:log             the session log
-- ARGV[1]  the first version wanted
-- ARGV[2]  how many events at most
--
-- Returns the log entries, oldest first, as XRANGE gives them.

local first, wanted = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}

local function take(entry)
  local start = tonumber(string.match(entry[1], '^(%d+)'))
  local fields, cursor, count = entry[2], nil, 0
  for i = 1, #fields, 2 do
    if fields[i] == 'c' then cursor = fields[i + 1]
    elseif fields[i] == 'n' then count = tonumber(fields[i + 1]) end
  end
  local skip = math.max(0, first - start)
  local n = math.min(count - skip, wanted)
  if n <= 0 or not cursor then return end
  local found = redis.call('XRANGE', KEYS[2], cursor, '+', 'COUNT', skip + n)
  for j = skip + 1, math.min(#found, skip + n) do out[#out + 1] = found[j] end
  wanted = wanted - n
end

for _, entry in ipairs(redis.call('XREVRANGE', KEYS[1], first .. '-0', '-', 'COUNT', 1)) do
  take(entry)
end
if wanted > 0 then
  for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '(' .. first .. '-0', '+', 'COUNT', wanted)) do
    if wanted <= 0 then break end
    take(entry)
  end
end
return out

-- Write recorded events of one stream as they are, with their versions and cursors: a session
-- moved here from another store, or a ledger export imported into an empty session.
--
-- KEYS[1..7]  as append.lua's: log, meta, stream index, idempotency (unused here), open, safe,
--             tomb; and for events that keep fields as artifacts, KEYS[8] lb:{S}:arts and
--             KEYS[9 ..] lb:{S}:art:<sha256>, written before the call
-- ARGV[1]     stream name
-- ARGV[2]     the version of the first event
-- ARGV[3]     n, the number of events, consecutive in the stream and in the session's commit order
-- ARGV[4 .. 3+n]      the events' cursors, as Redis entry ids (<ms>-<seq>), ascending
-- ARGV[4+n .. 3+2n]   one msgpack payload per event, never decoded here
-- ARGV[4+2n]          the events' notes for the attempt bookkeeping, as append.lua takes them
-- ARGV[5+2n ..]       per artifact of KEYS[9 ..], its sha256 and how many fields reference it
--
-- A batch whose cursors are at or below the log's last id is there already (a restore cut
-- short and run again): it writes nothing. Returns {"ok", events written, attempts opened},
-- {"archived", where},
-- {"conflict", the stream's version} when the first event does not follow the stream's
-- version, {"order"} for cursors that do not ascend from the log's last id, {"noartifact", key} or
-- {"noperm", command, key}. Nothing is written unless the reply is "ok". The events are written
-- in one piece of the log, so the stream index holds one entry for them, as for an append; no
-- append_id is recorded, and a bound never trims here.

local n = tonumber(ARGV[3])
local notes = ARGV[4 + 2 * n]
local arts = 5 + 2 * n

local tomb = redis.call('HMGET', KEYS[7], 'archive')
if tomb[1] then return {'archived', tomb[1]} end

local function id_of(text)
  local ms, seq = string.match(text, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function above(a_ms, a_seq, b_ms, b_seq)
  return a_ms > b_ms or (a_ms == b_ms and a_seq > b_seq)
end

-- The log's last id outlives a deletion (delete_session.lua): new cursors never go below it.
local last_ms, last_seq = 0, 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last_ms, last_seq = id_of(info[i + 1]) end
  end
end
-- A batch at or below it was written by an earlier run of the same restore: each batch is
-- written whole, so it is there whole.
local ms, seq = id_of(ARGV[n + 3])
if ms and not above(ms, seq, last_ms, last_seq) then return {'ok', 0, 0} end
local prev_ms, prev_seq = last_ms, last_seq
for i = 1, n do
  ms, seq = id_of(ARGV[3 + i])
  if not ms or not above(ms, seq, prev_ms, prev_seq) then return {'order'} end
  prev_ms, prev_seq = ms, seq
end

local first = tonumber(ARGV[2])
local version = redis.call('HGET', KEYS[2], ARGV[1])
-- A stream's first event here may come after others a bound trimmed; from then on its versions
-- follow one another.
if version and tonumber(version) ~= first - 1 then return {'conflict', tonumber(version)} end
for j = 9, #KEYS do
  if redis.call('EXISTS', KEYS[j]) == 0 then return {'noartifact', KEYS[j]} end
end

-- Redis never rolls a script back: every write is checked against the caller's ACL first.
local acl = redis.acl_check_cmd
if acl then
  local checks = {
    {'XADD', KEYS[1], '*', 'f', 'v'}, {'XADD', KEYS[3], '*', 'f', 'v'},
    {'HSET', KEYS[2], 'f', 'v'}, {'HSET', KEYS[5], 'f', 'v'}, {'HDEL', KEYS[5], 'f'},
    {'HSET', KEYS[6], 'f', 'v'},
  }
  if KEYS[9] then
    checks[#checks + 1] = {'PERSIST', KEYS[9]}
    checks[#checks + 1] = {'HINCRBY', KEYS[8], 'f', '1'}
  end
  for _, check in ipairs(checks) do
    if not acl(unpack(check)) then return {'noperm', check[1], check[2]} end
  end
end

-- The notes mean here what they mean to append.lua: o opens an attempt, c closes it, f flags
-- it (only the attempt whose tool_call the flag names, and only once), s marks a tool safe.
local function note(text, cursor)
  if text == '' then return end
  local kind, rest = string.sub(text, 1, 1), string.sub(text, 3)
  if kind == 's' then
    redis.call('HSET', KEYS[6], rest, 1)
    return
  end
  local split = string.find(rest, '\31', 1, true)
  local key = split and string.sub(rest, 1, split - 1) or rest
  local value = split and string.sub(rest, split + 1) or ''
  if kind == 'o' then
    redis.call('HSET', KEYS[5], key, value .. '\31' .. ARGV[1] .. '\31' .. cursor .. '\31')
  elseif kind == 'c' then
    redis.call('HDEL', KEYS[5], key)
  elseif kind == 'f' then
    local open = redis.call('HGET', KEYS[5], key)
    if open and string.sub(open, -1) == '\31'
        and (value == '' or value == string.match(open, '([^\31]*)\31$')) then
      redis.call('HSET', KEYS[5], key, open .. cursor)
    end
  end
end

local texts = {}
for part in string.gmatch(notes, '\30([^\30]*)') do texts[#texts + 1] = part end
local opened = 0
local first_cursor
for i = 1, n do
  local text = string.format('%d', first + i - 1)
  local cursor = redis.call('XADD', KEYS[1], ARGV[3 + i], 's', ARGV[1], 'v', text,
                            'p', ARGV[3 + n + i])
  first_cursor = first_cursor or cursor
  if string.sub(texts[i] or '', 1, 1) == 'o' then opened = opened + 1 end
  note(texts[i] or '', cursor)
end
local uses = {}
for k = 9, #KEYS do
  local sha, count = ARGV[arts + 2 * (k - 9)], ARGV[arts + 2 * (k - 9) + 1]
  redis.call('PERSIST', KEYS[k])
  redis.call('HINCRBY', KEYS[8], sha, count)
  uses[#uses + 1] = sha .. ':' .. count
end
local written = n
local first_text = string.format('%d', first)
if #uses > 0 then
  redis.call('XADD', KEYS[3], first_text .. '-0', 'c', first_cursor, 'n', written,
             'a', table.concat(uses, ' '))
else
  redis.call('XADD', KEYS[3], first_text .. '-0', 'c', first_cursor, 'n', written)
end
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', first + written - 1))
return {'ok', written, opened}

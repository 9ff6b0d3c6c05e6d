-- Append events to one stream of a session: idempotency, then expected version, then all writes.
--
-- KEYS[1]  lb:{S}:log           session log; entry id = commit cursor; fields s, v, p
-- KEYS[2]  lb:{S}:meta          hash: stream name -> version
-- KEYS[3]  lb:{S}:s:<stream>    stream index, one entry per append: id <first version>-0,
--                               fields c = cursor of its first event, n = number of events
-- KEYS[4]  lb:{S}:idem:<stream> hash: append_id -> "<digest><first> <n> <cursor> <generation>",
--                               the digest its 32 raw bytes (the older form, still read:
--                               "<digest in hex> <first> <last> <cursor> [<generation>]")
-- KEYS[5]  lb:{S}:open          hash: attempt_id -> "<run>\31<tool>\31<stream>\31<cursor>\31<flag>"
-- KEYS[6]  lb:{S}:safe          hash: "<run>\31<tool>" -> 1 for tools declared safe to replay
-- KEYS[7]  lb:{S}:tomb          hash: generation (deletions so far), deleted_ms, and archive
--                               (where the session went, once an archive began: archiving.py)
-- and only for an append whose events keep fields as artifacts (spec 3.11):
-- KEYS[8]  lb:{S}:arts          hash: sha256 -> references to the artifact in the log
-- KEYS[9 ..]                    lb:{S}:art:<sha256>, one per artifact, written before the call
-- ARGV[1]  stream name
-- ARGV[2]  expected version, or -1 for any
-- ARGV[3]  append_id
-- ARGV[4]  sha256 (32 raw bytes) of the RFC 8785 bytes of the events as given
-- ARGV[5]  n, the number of events
-- ARGV[6]  the highest version of this stream acknowledged to this writer (0: none known)
-- ARGV[7]  "1" to write even a duplicate (so that a WAIT after it covers the original write)
-- ARGV[8]  the generation the version of ARGV[6] belongs to
-- ARGV[9]  the fence: "<lease name>\31<owner>\31<token>" for an append made under a lease
--          (lease.lua), or "" for none. Unless lb:{S}:lease:<name> is held by that owner and
--          lb:{S}:fences names that token for it, the append is refused before anything else is
--          looked at: its writer's holding is over (expired, or taken by another), even where
--          nobody holds the lease now.
-- ARGV[10 .. 9+n]    one msgpack payload per event, never decoded here
-- ARGV[10+n]         the events' notes for the attempt bookkeeping (events.attempt_note), one
--                    per event in order, each begun by \30:
--                    o\31<attempt>\31<run>\31<tool>   a tool_call opens an attempt
--                    c\31<attempt>                    a tool_result closes it
--                    f\31<attempt>\31<call cursor, or "">  a reconcile.unresolved flags it
--                    s\31<run>\31<tool>               a tool.declared marks the tool safe to replay
--                    (empty)                           the event means nothing to attempts
--                    One argument, read with plain finds: an argument per part cost the
--                    client more to pack, and the server more to take in, than this reading.
-- ARGV[11+n ..]     per artifact of KEYS[9 ..], its sha256 and how many fields reference it
--
-- A stream named in lb:{S}:bounds (spec 3.12) is trimmed after the append: see trim() below.
-- lb:{S}:bounds, lb:{S}:t:<stream>, lb:{S}:arts and lb:{S}:art:<sha256> are named from KEYS[7]'s
-- prefix; they are in the session's slot.
--
-- Returns {"ok", first, last, cursor, opened, generation}, {"dup", first, last, cursor,
-- generation of the original}, {"idem"}, {"archived", where}, {"fenced", the lease's current
-- token, or 0 when it has none}, {"conflict", actual version},
-- {"rewound", actual version}, {"noartifact", key} (an artifact is gone: write it again) or
-- {"noperm", command, key}. Nothing is written unless the reply is "ok". An append's events
-- are consecutive in the session log (this script runs alone), which is what lets the stream
-- index hold one entry per append.

local n = tonumber(ARGV[5])
local notes = ARGV[10 + n]
local arts = 11 + n  -- where the artifacts' arguments begin

-- An append that writes nothing drops the artifacts written for it that nothing references: a
-- retry of an append recorded before, or refused, leaves nothing behind. (One written for an
-- append of another writer that is yet to run is written again: "noartifact" below.)
local function reply(...)
  for j = 9, #KEYS do
    if redis.call('HEXISTS', KEYS[8], ARGV[arts + 2 * (j - 9)]) == 0 then
      redis.call('UNLINK', KEYS[j])
    end
  end
  return {...}
end

local prefix = string.sub(KEYS[7], 1, -5)  -- lb:{S}:tomb -> lb:{S}:
if ARGV[9] ~= '' then
  -- First of all, the append_id included: a writer whose holding is over learns that, not a
  -- conflict to retry nor another writer's append taken for its own (the next holder may have
  -- used the same append_id at the same version), and the rightful holder is never refused for
  -- what a zombie tried.
  local name, owner, token = string.match(ARGV[9], '^(.*)\31(.*)\31(%d+)$')
  local current = redis.call('HGET', prefix .. 'fences', name)
  if current ~= token or redis.call('GET', prefix .. 'lease:' .. name) ~= owner then
    return reply('fenced', tonumber(current) or 0)
  end
end

local prior = redis.call('HGET', KEYS[4], ARGV[3])
if prior then
  local digest, first, last, cursor, written_in
  if string.byte(prior, 65) == 32 and string.find(string.sub(prior, 1, 64), '^%x+$') then
    -- Written before digests were kept as bytes; before deletions existed it has no
    -- generation: it is of the first, 0.
    digest, first, last, cursor, written_in =
        string.match(prior, '^(%x+) (%d+) (%d+) (%S+) ?(%d*)$')
    digest = string.gsub(digest, '%x%x', function(h) return string.char(tonumber(h, 16)) end)
  else
    local count
    first, count, cursor, written_in = string.match(prior, '^(%d+) (%d+) (%S+) (%d+)$', 33)
    digest, last = string.sub(prior, 1, 32), tonumber(first) + tonumber(count) - 1
  end
  if digest == ARGV[4] then
    if ARGV[7] == '1' then
      -- The reply's WAIT counts replicas that have everything this connection wrote; a retry
      -- on a new connection wrote nothing, so it rewrites the version as it is, replicated
      -- after the original append.
      redis.call('HSET', KEYS[2], ARGV[1], redis.call('HGET', KEYS[2], ARGV[1]))
    end
    return reply('dup', tonumber(first), tonumber(last), cursor, tonumber(written_in) or 0)
  end
  return reply('idem')
end

local tomb = redis.call('HMGET', KEYS[7], 'generation', 'archive')
if tomb[2] then
  -- The session is moving to (or has moved to) the archive, which answers for it from now on.
  return reply('archived', tomb[2])
end
local generation = tomb[1] or '0'
local version = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if version < tonumber(ARGV[6]) and generation == ARGV[8] then
  -- This writer was told of a longer stream: a failover has lost acknowledged events. Writing
  -- now would give new events the versions those held. (Told of it in an earlier generation,
  -- the stream was deleted since: that is no loss.)
  return reply('rewound', version)
end
local expected = tonumber(ARGV[2])
if expected >= 0 and expected ~= version then
  return reply('conflict', version)
end

local bound = redis.call('HGET', prefix .. 'bounds', ARGV[1])
-- "<keep> <window ms>", or "<keep> <window ms> <only>": a bound for the appends whose
-- append_id begins with <only> (a rewrite's own), inert for every other append.
local keep, window_ms, only
if bound then
  keep, window_ms, only = string.match(bound, '^(%d+) (%d+) ?(%S*)$')
  if only ~= '' and string.sub(ARGV[3], 1, #only) ~= only then bound = nil end
end
-- An artifact written before the call may have expired, or gone with a deletion since.
for j = 9, #KEYS do
  if redis.call('EXISTS', KEYS[j]) == 0 then return {'noartifact', KEYS[j]} end
end

-- Redis never rolls a script back: a write refused halfway (an ACL that lacks one command or
-- one key) would leave the events written before it. So every write this append will make is
-- checked against the caller's ACL first, and a refusal writes nothing.
-- The checks are written out in full, without helper closures or tables: this block runs on
-- every append, and at Lua's speed their making was measurable.
local acl = redis.acl_check_cmd
if acl then  -- Redis 7 and Valkey; absent from test doubles
  -- A note's kind is the byte after its \30 (no id holds a control byte).
  local opens = string.find(notes, '\30o', 1, true)
  local flags = string.find(notes, '\30f', 1, true)
  local closes = string.find(notes, '\30c', 1, true)
  local safes = string.find(notes, '\30s', 1, true)
  local command, key
  if not acl('XADD', KEYS[1], '*', 'f', 'v') then command, key = 'XADD', KEYS[1]
  elseif not acl('XADD', KEYS[3], '*', 'f', 'v') then command, key = 'XADD', KEYS[3]
  elseif not acl('HSET', KEYS[2], 'f', 'v') then command, key = 'HSET', KEYS[2]
  elseif not acl('HSET', KEYS[4], 'f', 'v') then command, key = 'HSET', KEYS[4]
  elseif (opens or flags) and not acl('HSET', KEYS[5], 'f', 'v') then command, key = 'HSET', KEYS[5]
  elseif flags and not acl('HGET', KEYS[5], 'f') then command, key = 'HGET', KEYS[5]
  elseif closes and not acl('HDEL', KEYS[5], 'f') then command, key = 'HDEL', KEYS[5]
  elseif safes and not acl('HSET', KEYS[6], 'f', 'v') then command, key = 'HSET', KEYS[6]
  elseif KEYS[9] and not acl('PERSIST', KEYS[9]) then command, key = 'PERSIST', KEYS[9]
  elseif KEYS[9] and not acl('HINCRBY', KEYS[8], 'f', '1') then command, key = 'HINCRBY', KEYS[8]
  elseif bound then
    local trimmed, arts_key = prefix .. 't:' .. ARGV[1], prefix .. 'arts'
    if not acl('XDEL', KEYS[1], '0-1') then command, key = 'XDEL', KEYS[1]
    elseif not acl('XDEL', KEYS[3], '0-1') then command, key = 'XDEL', KEYS[3]
    elseif not acl('XACK', KEYS[1], 'g', '0-1') then command, key = 'XACK', KEYS[1]
    elseif not acl('XINFO', 'GROUPS', KEYS[1]) then command, key = 'XINFO', KEYS[1]
    elseif not acl('XADD', trimmed, '*', 'f', 'v') then command, key = 'XADD', trimmed
    elseif not acl('HDEL', KEYS[4], 'f') then command, key = 'HDEL', KEYS[4]
    elseif not acl('HINCRBY', arts_key, 'f', '1') then command, key = 'HINCRBY', arts_key
    elseif not acl('HDEL', arts_key, 'f') then command, key = 'HDEL', arts_key
    elseif not acl('UNLINK', prefix .. 'art:0') then command, key = 'UNLINK', prefix .. 'art:0'
    end
  end
  if command then return {'noperm', command, key} end
end

local first = version + 1
local first_cursor, cursor, first_text, text
local at = 1  -- where the next event's note begins in `notes`, at its \30
-- The attempts opened are written together, one HSET for the lot (a call per tool_call costs
-- a large append dearly), before any other note and at the end: a note that closes or flags
-- an attempt opened earlier in the same append finds it written.
local opens, opened = {}, 0
local function write_opens()
  if #opens > 0 then
    redis.call('HSET', KEYS[5], unpack(opens))
    opened, opens = opened + #opens / 2, {}
  end
end
for i = 1, n do
  version = version + 1
  -- A Lua number given to redis.call, or joined to a string, is printed with %.17g (%.14g),
  -- which is slow: each version is formatted once, as an integer, and that text is what every
  -- write below uses.
  text = string.format('%d', version)
  cursor = redis.call('XADD', KEYS[1], '*', 's', ARGV[1], 'v', text, 'p', ARGV[9 + i])
  first_cursor = first_cursor or cursor
  first_text = first_text or text
  local ends = string.find(notes, '\30', at + 1, true) or #notes + 1
  if ends > at + 1 then
    local kind = string.sub(notes, at + 1, at + 1)
    if kind == 's' then
      redis.call('HSET', KEYS[6], string.sub(notes, at + 3, ends - 1), 1)
    else
      -- o, c and f: the attempt id, then (o, f) what follows it
      local split = string.find(notes, '\31', at + 3, true)
      if not split or split > ends then split = ends end
      local key = string.sub(notes, at + 3, split - 1)
      if kind == 'o' then
        local size = #opens
        opens[size + 1] = key
        opens[size + 2] = string.sub(notes, split + 1, ends - 1) .. '\31' .. ARGV[1] .. '\31'
            .. cursor .. '\31'
      else
        write_opens()
        if kind == 'c' then
          redis.call('HDEL', KEYS[5], key)
        else
          -- Only the attempt whose tool_call the flag names (its cursor; '' for any) and only
          -- once: an attempt id used again later is another attempt, flagged on its own.
          local value = string.sub(notes, split + 1, ends - 1)
          local open = redis.call('HGET', KEYS[5], key)
          if open and string.sub(open, -1) == '\31'
              and (value == '' or value == string.match(open, '([^\31]*)\31$')) then
            redis.call('HSET', KEYS[5], key, open .. cursor)
          end
        end
      end
    end
  end
  at = ends
end
write_opens()
if KEYS[9] then
  -- Referenced, the artifacts stay; the stream index says which, for a stream's deletion.
  local uses = {}
  for k = 9, #KEYS do
    local sha, count = ARGV[arts + 2 * (k - 9)], ARGV[arts + 2 * (k - 9) + 1]
    redis.call('PERSIST', KEYS[k])
    redis.call('HINCRBY', KEYS[8], sha, count)
    uses[#uses + 1] = sha .. ':' .. count
  end
  if bound then
    redis.call('XADD', KEYS[3], first_text .. '-0', 'c', first_cursor, 'n', ARGV[5],
               'a', table.concat(uses, ' '), 'i', ARGV[3])
  else
    redis.call('XADD', KEYS[3], first_text .. '-0', 'c', first_cursor, 'n', ARGV[5],
               'a', table.concat(uses, ' '))
  end
elseif bound then
  redis.call('XADD', KEYS[3], first_text .. '-0', 'c', first_cursor, 'n', ARGV[5], 'i', ARGV[3])
else
  redis.call('XADD', KEYS[3], first_text .. '-0', 'c', first_cursor, 'n', ARGV[5])
end
redis.call('HSET', KEYS[2], ARGV[1], text)
redis.call('HSET', KEYS[4], ARGV[3],
           ARGV[4] .. first_text .. ' ' .. ARGV[5] .. ' ' .. cursor .. ' ' .. generation)

-- A bounded stream keeps at least its newest `keep` events: the appends wholly older go from
-- the log (acknowledged in every group, their artifacts' references dropped) and from the stream
-- index, into lb:{S}:t:<stream>, which keeps their append_ids for the dedup window after they
-- committed. A hundred appends at most of each per call, so declaring a bound on a long stream
-- trims it over the appends that follow, never holding the server long.
local function trim(upto, window_ms, now_ms)
  local trimmed = prefix .. 't:' .. ARGV[1]
  local groups
  for _, append in ipairs(redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 100)) do
    local f = {}
    for i = 1, #append[2], 2 do f[append[2][i]] = append[2][i + 1] end
    if tonumber(string.match(append[1], '^(%d+)')) + tonumber(f['n']) - 1 > upto then break end
    local ids = {}
    for _, entry in ipairs(redis.call('XRANGE', KEYS[1], f['c'], '+', 'COUNT', f['n'])) do
      ids[#ids + 1] = entry[1]
    end
    if #ids > 0 then
      if not groups then
        groups = {}
        for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
          for i = 1, #group, 2 do
            if group[i] == 'name' then groups[#groups + 1] = group[i + 1] end
          end
        end
      end
      for _, group in ipairs(groups) do redis.call('XACK', KEYS[1], group, unpack(ids)) end
      redis.call('XDEL', KEYS[1], unpack(ids))
    end
    if f['a'] then
      for sha, count in string.gmatch(f['a'], '(%x+):(%d+)') do
        if redis.call('HINCRBY', prefix .. 'arts', sha, -tonumber(count)) <= 0 then
          redis.call('HDEL', prefix .. 'arts', sha)
          redis.call('UNLINK', prefix .. 'art:' .. sha)
        end
      end
    end
    redis.call('XDEL', KEYS[3], append[1])
    if f['i'] then redis.call('XADD', trimmed, append[1], 'i', f['i'], 'c', f['c']) end
  end
  for _, gone in ipairs(redis.call('XRANGE', trimmed, '-', '+', 'COUNT', 100)) do
    local f = {}
    for i = 1, #gone[2], 2 do f[gone[2][i]] = gone[2][i + 1] end
    if tonumber(string.match(f['c'], '^(%d+)')) + window_ms > now_ms then break end
    redis.call('HDEL', KEYS[4], f['i'])
    redis.call('XDEL', trimmed, gone[1])
  end
end

if bound then
  trim(version - tonumber(keep), tonumber(window_ms), tonumber(string.match(cursor, '^(%d+)')))
end
return {'ok', first, version, cursor, opened, tonumber(generation)}

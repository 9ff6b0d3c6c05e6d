-- A lease (a run's, an adapter's session): held by one owner, expiring unless renewed, and
-- fenced: each acquisition by a new holding draws the next token of the lease, which every
-- append made under it names (append.lua's ARGV[9]). An append naming a token that is no longer
-- the lease's current holding is refused there, so a process that lost its lease (stopped past
-- its TTL, its renewals cut off) writes nothing more, whatever it had queued.
--
-- KEYS[1]  lb:{S}:lease:<name>   string: the owner, with a TTL
-- KEYS[2]  lb:{S}:fences         hash: lease name -> its current token; never expires, and
--                                outlives the session's deletion, so tokens only ever grow
-- ARGV[1]  "acquire", "renew" or "release"
-- ARGV[2]  owner
-- ARGV[3]  time to live in milliseconds (acquire, renew)
-- ARGV[4]  the lease's name (its field in KEYS[2])
--
-- Returns, for acquire and renew, the token of the holding (>= 1) when the owner holds the
-- lease afterwards; for release, 1 when the owner let it go. 0 when another owner holds it or,
-- for renew and release, when it is gone (expired: the holding is over, whoever takes the lease
-- next draws a new token, this owner included).

local holder = redis.call('GET', KEYS[1])
if ARGV[1] == 'acquire' then
  if holder and holder ~= ARGV[2] then return 0 end
  local token = holder and redis.call('HGET', KEYS[2], ARGV[4])
  -- A new holding (the lease free, or held from before leases were fenced) draws a new token.
  if not token then token = redis.call('HINCRBY', KEYS[2], ARGV[4], 1) end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return tonumber(token)
end
if holder ~= ARGV[2] then return 0 end
if ARGV[1] == 'renew' then
  local token = redis.call('HGET', KEYS[2], ARGV[4])
  if not token then token = redis.call('HINCRBY', KEYS[2], ARGV[4], 1) end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return tonumber(token)
end
redis.call('DEL', KEYS[1])
return 1

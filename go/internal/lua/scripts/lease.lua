-- A run's lease: held by one owner token, expiring unless renewed.
--
-- KEYS[1]  lb:{S}:lease:<run>   string: the owner token, with a TTL
-- ARGV[1]  "acquire", "renew" or "release"
-- ARGV[2]  owner token
-- ARGV[3]  time to live in milliseconds (acquire, renew)
--
-- Returns 1 when the owner holds the lease afterwards (acquire, renew) or let it go (release),
-- 0 when another owner holds it or, for renew and release, when it is gone.

local holder = redis.call('GET', KEYS[1])
if ARGV[1] == 'acquire' then
  if holder and holder ~= ARGV[2] then return 0 end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if holder ~= ARGV[2] then return 0 end
if ARGV[1] == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('DEL', KEYS[1])
end
return 1

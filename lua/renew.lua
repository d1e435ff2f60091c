-- leasehold renew (DESIGN §4). Atomic; idempotent for one attempt, so a renew whose reply
-- was lost can be sent again.
--
-- KEYS[1]  lease key
-- ARGV[1]  owner token
-- ARGV[2]  operation id
-- ARGV[3]  ttl in milliseconds
--
-- Replies (protocol::RenewReply):
--   {'RENEWED'}    held by this attempt; expiry reset to ttl from now
--   {'ABSENT'}     no lease key
--   {'NOT_OWNER'}  held by someone else; untouched

local held = redis.call('HMGET', KEYS[1], 'o', 'p')
if not held[1] then
  return {'ABSENT'}
end
if held[1] ~= ARGV[1] or held[2] ~= ARGV[2] then
  return {'NOT_OWNER'}
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'RENEWED'}

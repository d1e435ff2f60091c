-- leasehold release (DESIGN §4). Atomic, owner-checked.
--
-- KEYS[1]  lease key
-- ARGV[1]  owner token
-- ARGV[2]  operation id
-- ARGV[3]  release channel (shares the key's hash tag; published to, not stored)
--
-- Replies (protocol::ReleaseReply):
--   {'RELEASED'}   held by this attempt; deleted and a notice published on the channel
--   {'ABSENT'}     no lease key
--   {'NOT_OWNER'}  held by someone else; untouched
--
-- The fence counter is left in place: the next holder's token must be greater.

local held = redis.call('HMGET', KEYS[1], 'o', 'p')
if not held[1] then
  return {'ABSENT'}
end
if held[1] ~= ARGV[1] or held[2] ~= ARGV[2] then
  return {'NOT_OWNER'}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], 'released')
return {'RELEASED'}

-- leasehold batch (docs/design.md §4): the one script leasehold sends, by EVALSHA. Its source is
-- plain.lua (which runs a call of plain acquisitions and releases by itself, or the first
-- of its items), owner.lua, line.lua, acquire.lua, renew.lua, release.lua and inspect.lua
-- (each defines local functions), then this file, which runs a list of items — one or
-- many operations on any leases — in order, atomically as a whole: those plain.lua did
-- not run.
--
-- ARGV[1] is the call's id, echoed first in the reply: a client that reads a reply meant
-- for another call (a connection whose stream lost bytes) sees the wrong id and trusts
-- none of it. Then each item takes two ARGV — its head (kind letter, then the ttl where
-- the kind has one, and for acquire the holder label if any, after a space) and
-- "<owner> <op> " — and its KEYS:
--   acquire  KEYS lease, fence, line
--                                ARGV 'A<ttl_ms> <w><id>' or 'A<ttl_ms> <w><id> <holder>',
--                                mine
--   counted  KEYS slot 0 … slot n-1, fence, line
--                                ARGV 'P<n> <ttl_ms> <w><id>' or
--                                'P<n> <ttl_ms> <w><id> <holder>', mine
--            (an acquisition of a counted lease of n permits, 1 < n <= 64)
--            either acquisition's ttl may be followed by '/<delay_ms>': its lock-delay;
--            <w> is '+' for a waiting acquisition's first try (it joins the line),
--            '=' for its later ones (in line already), '-' for a try, and <id> the
--            attempt's waiter id (lua/line.lua)
--   renew    KEYS lease          ARGV 'N<ttl_ms>', mine
--   release  KEYS lease          ARGV 'R', mine
--   inspect  KEYS lease, line    ARGV 'I', mine
--            KEYS lease          ARGV 'I-', mine   (the lease alone, its line not read:
--                                for a Cluster slot migrating, whose line has not moved)
--   leave    KEYS line           ARGV 'L<n> <id>', mine   (a waiter leaves the line of a
--                                lease of n permits: lua/line.lua)
--   keep     KEYS line           ARGV 'K<session>' or 'K<session>+', ''    (a line
--                                session keeps its waiters in the line alive; '+': and
--                                the line itself: lua/line.lua)
-- Two arguments and a one-line reply per item, rather than one argument per field and a
-- table per reply: each argument and each reply element costs Redis an allocation and a
-- conversion, which dominated the cost of a refusal.
--
-- Reply: one string, "<id>\n<reply of item 1>\n<reply of item 2>…": each item's reply as
-- its file lists it (one line of words), or, if that item raised an error (say NOPERM or
-- WRONGTYPE on its key), '-' and the error's text. An item that raised may have written
-- before it did; the items around it ran regardless, so one item's error is that item's,
-- never its neighbours'. One string rather than a table of replies: Redis makes a reply
-- object per table element, and the client parses and allocates each one.
--
-- Every item is checked to have its keys and arguments before any item runs: a batch with
-- a malformed item runs nothing and answers one error.

-- Kinds by their letter's byte (string.byte makes no string).
local A, N, R, I, P, L, K = string.byte('ANRIPLK', 1, 7)
local fixed = {[A] = 3, [N] = 1, [R] = 1, [I] = 2, [L] = 1, [K] = 1}
-- The keys an item takes: its kind's, or for a counted acquisition its slots and the fence
-- (nil for a malformed head).
local function width(head)
  local kind = string.byte(head)
  if kind == P then
    local n = tonumber(string.match(head, '^P(%d+) %d'))
    if n and n > 1 and n <= 64 then
      return n + 2
    end
    return nil
  end
  if head == 'I-' then
    return 1
  end
  return fixed[kind]
end
if #ARGV % 2 ~= 1 then
  return redis.error_reply('ERR leasehold batch: items take two arguments each')
end
-- Where each item's keys start (by its head's ARGV index), worked out once here.
local first = {}
local k = 1
for a = 2, #ARGV, 2 do
  local keys = width(ARGV[a])
  if not keys then
    return redis.error_reply('ERR leasehold batch: unknown item kind at ARGV ' .. a)
  end
  first[a] = k
  k = k + keys
end
if k ~= #KEYS + 1 then
  return redis.error_reply('ERR leasehold batch: keys and arguments do not match the items')
end

-- An acquisition head's parts after its kind (and a counted one's n): the ttl, the
-- lock-delay or nil, how it waits ('+' it joins, '=' it is in line already, false for a
-- try), the waiter id, the holder label or nil.
local function acquisition(rest)
  local ttl, delay, w, id, holder = string.match(rest, '^(%d+)/?(%d*) ([+=-])(%x+) ?(.*)$')
  if not ttl then
    error('ERR leasehold batch: malformed acquisition ' .. rest, 0)
  end
  if delay == '' then
    delay = nil
  end
  if holder == '' then
    holder = nil
  end
  return ttl, delay, w ~= '-' and w, id, holder
end

local function run(kind, head, at, mine)
  if kind == A then
    -- A plain acquisition (no lock-delay, no holder label) is read by one match on the
    -- head itself: the features it does not use cost it nothing.
    local ttl, w, id = string.match(head, '^A(%d+) ([+=-])(%x+)$')
    if ttl then
      return acquire(KEYS[at], KEYS[at + 1], mine, ttl, nil, nil, now, KEYS[at + 2], id,
        w ~= '-' and w)
    end
    local ttl, delay, waits, id, holder = acquisition(string.sub(head, 2))
    return acquire(KEYS[at], KEYS[at + 1], mine, ttl, holder, delay, now, KEYS[at + 2], id,
      waits)
  elseif kind == P then
    local n, rest = string.match(head, '^P(%d+) (.*)$')
    local ttl, delay, waits, id, holder = acquisition(rest)
    return acquire_slot(at, tonumber(n), mine, ttl, holder, delay, now, id, waits)
  elseif kind == N then
    return renew(KEYS[at], mine, string.sub(head, 2))
  elseif kind == R then
    return release(KEYS[at], mine)
  elseif kind == L then
    local n, id = string.match(head, '^L(%d+) (%x+)$')
    if not n then
      error('ERR leasehold batch: malformed leave ' .. head, 0)
    end
    return leave(KEYS[at], id, tonumber(n))
  elseif kind == K then
    local session, extend = string.match(head, '^K(%x+)(%+?)$')
    if not session then
      error('ERR leasehold batch: malformed keep ' .. head, 0)
    end
    return keep(KEYS[at], session, extend == '+')
  end
  if head == 'I-' then
    return inspect(KEYS[at], mine, nil)
  end
  return inspect(KEYS[at], mine, KEYS[at + 1])
end

-- The reply line for an item that raised `raised`: '-' and the error's text, its code
-- first.
local function failed(raised)
  -- Redis 7.0 raises a redis.call error as its text ('NOPERM …'), later versions as a
  -- table {err = …}; either way the error code stays first, for the client to classify.
  -- Redis 6.2 raises the refusals it makes before running a command (OOM, READONLY,
  -- MISCONF, NOREPLICAS) as '@user_script: <line>: -<CODE> …': its code is put first
  -- again, as 7.0 words it, so that the client reads it as not run here too.
  local refused = type(raised) == 'string' and
    string.match(raised, '^@user_script: %d+: %-(%u[%u_]+ .-)%s*$')
  local reply
  if type(raised) == 'table' and raised.err then
    reply = {err = raised.err}
  elseif type(raised) == 'string' and string.find(raised, '^%u[%u_]+ ') then
    reply = {err = raised}
  elseif refused then
    reply = {err = refused}
  else
    reply = {err = 'ERR leasehold batch: ' .. tostring(raised)}
  end
  -- Redis 7.0 words an ACL refusal inside a script as a plain error; later versions say
  -- NOPERM. Each item is refused before it writes its lease key (release publishes
  -- before it deletes), so the refusal is said as NOPERM: the client reads it as not run.
  if string.find(reply.err, "can't run this command", 1, true) then
    reply.err = 'NOPERM ' .. string.gsub(reply.err, '^%u+ ', '', 1)
  end
  -- On one line: a line break would split it into two replies.
  return '-' .. (string.gsub(reply.err, '[\r\n]', ' '))
end

-- The items lua/plain.lua did not run (all of them, unless the call is all plain items),
-- from the item at `at`, in one protected call, not one each (a pcall per item cost a
-- plain cycle about as much as its acquisition notice): an item that raises ends that
-- call, its error is its reply, and the next call runs on from the item after it.
if plain_read then
  known[plain_read[1]] = plain_read[2] and {plain_read[2]} or false
end
local a, last = at, #ARGV
if plain_raised then
  replies[#replies + 1] = failed(plain_raised[1])
  a = a + 2
end
local function run_on()
  while a <= last do
    local head = ARGV[a]
    replies[#replies + 1] = run(string.byte(head), head, first[a], ARGV[a + 1])
    a = a + 2
  end
end
while a <= last do
  local ok, raised = pcall(run_on)
  if not ok then
    replies[#replies + 1] = failed(raised)
    a = a + 2
  end
end
return table.concat(replies, '\n')

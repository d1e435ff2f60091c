"""Redis CPU of leasehold's batch script per acquire -> release cycle, beside the native lock
shapes, at several items per call; and variants of the script with one feature taken out,
to see what each costs. Not part of CI: a developer's tool for docs/performance.md.

    pip install redis
    python3 benches/lua_cost.py .                 # 1, 4, 16, 32 items per call
    NS=16,32 SHORT=1 python3 benches/lua_cost.py . # short keys instead of leasehold's layout
    INSTRUCTIONS=1 python3 benches/lua_cost.py .   # instructions (valgrind), not CPU time

Starts its own redis-server on a free loopback port (no persistence) and stops it by PID.
Each row is the median of 3 rounds of Redis CPU (INFO cpu, sys + user) divided by the
cycles; rounds of the shapes alternate, so all see the same background load. On a busy
machine that moves by ±30%: INSTRUCTIONS=1 counts what Redis runs instead (one round, user
space only, the same from run to run within about 1%).
"""
import os, sys, random
from scratch_redis import scratch_redis

root = sys.argv[1]
def src(name): return open(os.path.join(root, 'lua', name)).read()
BATCH = "\n".join(src(n) for n in ['plain.lua','owner.lua','line.lua','acquire.lua','renew.lua','release.lua','inspect.lua','batch.lua'])
variants = {
  'leasehold': BATCH,
  # Every call through batch.lua's general path, as a call with one item that is not plain
  # (a holder label, a lock-delay, a counted lease, an inspection) goes.
  'general-path': BATCH.replace("local plain = #ARGV % 2 == 1", "local plain = false"),
  'no-acq-publish': BATCH.replace("redis.pcall('PUBLISH', lease .. ':acquired', text)", ""),
  'no-release-publish': BATCH.replace("redis.pcall('PUBLISH', lease .. ':released', 'released')", ""),
  # The line's check on a free lease (one EXISTS of an absent line), as if there were no line.
  'no-line': BATCH.replace("elseif redis.pcall('EXISTS', KEYS[key + 2]) ~= 0 then", "elseif false then"),
  'no-fence': BATCH.replace("local last = tonumber(redis.call('SET', fence, text, 'GET'))", "local last = nil"),
}
variants['no-publish-no-fence'] = variants['no-acq-publish'].replace("redis.pcall('PUBLISH', lease .. ':released', 'released')", "").replace("local last = tonumber(redis.call('SET', fence, text, 'GET'))", "local last = nil")
# What the script call itself costs per cycle: the same keys and arguments, items that do
# nothing but answer.
variants['framing-only'] = "local out = {ARGV[1]} for a = 2, #ARGV, 2 do out[#out + 1] = 'RELEASED' end return table.concat(out, '\\n')"
# leasehold's Redis calls for a plain cycle with no logic around them: what its own Lua
# logic costs is leasehold's row less this one.
variants['lean-same-calls'] = r'''
local out = {ARGV[1]}
local now
local k = 1
for a = 2, #ARGV, 2 do
  local head, mine = ARGV[a], ARGV[a + 1]
  if string.byte(head) == 65 then
    local lease, fence, line = KEYS[k], KEYS[k + 1], KEYS[k + 2]
    k = k + 3
    local held = redis.call('GET', lease)
    if held or redis.call('EXISTS', line) ~= 0 then
      out[#out + 1] = 'CONTENDED'
    else
      if not now then local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
      local token = now
      local text = string.format('%d', token)
      local last = tonumber(redis.call('SET', fence, text, 'GET'))
      if last and last >= token then token = last + 1; text = string.format('%d', token); redis.call('SET', fence, text) end
      local ttl = string.match(head, '^A(%d+)')
      redis.call('SET', lease, mine .. text, 'PX', ttl)
      redis.pcall('PUBLISH', lease .. ':acquired', text)
      out[#out + 1] = 'ACQUIRED ' .. ttl .. ' ' .. text
    end
  else
    local lease = KEYS[k]
    k = k + 1
    local held = redis.call('GET', lease)
    if held and string.find(held, mine, 1, true) == 1 then
      redis.call('DEL', lease)
      redis.pcall('PUBLISH', lease .. ':released', 'released')
      out[#out + 1] = 'RELEASED'
    else
      out[#out + 1] = 'ABSENT'
    end
  end
end
return table.concat(out, '\n')
'''
for k, v in variants.items(): assert k == 'leasehold' or v != BATCH, k

RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
ARL_LOCK = 'for i = 1, #KEYS do if redis.call("EXISTS", KEYS[i]) > 0 then return 0 end end for i = 1, #KEYS do redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2]) end return 1'
# benches/load's fenced floor (FLOOR_FENCED_ACQUIRE_LUA, FLOOR_RELEASE_PUBLISH_LUA), one call
# per acquisition and per release, pipelined: the row leasehold's W rows are measured against.
FENCED_ACQUIRE = ("if redis.call('GET',KEYS[1]) then return false end "
    "local t=redis.call('TIME') local token=t[1]*1000000+t[2] "
    "local text=string.format('%d',token) "
    "local last=tonumber(redis.call('SET',KEYS[2],text,'GET')) "
    "if last and last>=token then token=last+1 text=string.format('%d',token) "
    "redis.call('SET',KEYS[2],text) end "
    "redis.call('SET',KEYS[1],ARGV[1]..' '..text,'PX',ARGV[2]) return token")
FENCED_RELEASE = ("if redis.call('GET',KEYS[1])==ARGV[1] then "
    "redis.call('DEL',KEYS[1]) redis.call('PUBLISH',ARGV[2],'released') return 1 "
    "else return 0 end")

# INSTRUCTIONS=1: instructions Redis ran per cycle (callgrind) instead of its CPU time.
INSTRUCTIONS = os.environ.get('INSTRUCTIONS') == '1'
with scratch_redis(INSTRUCTIONS) as (r, cpu):
    mine = 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA bench '
    SHORT = os.environ.get('SHORT') == '1'
    def lkey(i):
        h = '%064x' % random.getrandbits(256)
        if SHORT:
            return 'l:{%s}:%s' % (h[:4], h[:12]), 'l:{%s}:f' % h[:4], 'l:{%s}:%s:l' % (h[:4], h[:12])
        lease = 'leasehold:lease:v2:bench:{%s}:%s' % (h[:4], h)
        return lease, 'leasehold:lease:v2:bench:{%s}:fence' % h[:4], lease + ':line'
    def leasehold(sha, n):
        keys = [lkey(i) for i in range(n)]
        akeys = [k for pair in keys for k in pair]
        aargs = ['1'] + [x for _ in keys for x in ('A30000 -0123456789abcdef', mine)]
        r.evalsha(sha['batch'], len(akeys), *akeys, *aargs)
        rkeys = [k for k, _, _ in keys]
        rargs = ['2'] + [x for _ in keys for x in ('R', mine)]
        out = r.evalsha(sha['batch'], len(rkeys), *rkeys, *rargs)
        # One string: the call's id, then a line per item (lua/batch.lua).
        assert all(o == b'RELEASED' for o in out.split(b'\n')[1:]), out[:40]
    def native(sha, n):  # rslock / floor shape, pipelined: SET NX PX, then script GET+DEL
        keys = ['floor:%x' % random.getrandbits(64) for _ in range(n)]
        p = r.pipeline(transaction=False)
        for k in keys: p.set(k, 'tok', nx=True, px=30000)
        p.execute()
        p = r.pipeline(transaction=False)
        for k in keys: p.evalsha(sha['release'], 1, k, 'tok')
        p.execute()
    def arl(sha, n):  # async-redis-lock shape: script EXISTS+SET, script GET+DEL
        keys = ['arl:%x' % random.getrandbits(64) for _ in range(n)]
        p = r.pipeline(transaction=False)
        for k in keys: p.evalsha(sha['lock'], 1, k, 'tok', 30000)
        p.execute()
        p = r.pipeline(transaction=False)
        for k in keys: p.evalsha(sha['release'], 1, k, 'tok')
        p.execute()
    def fenced(sha, n):  # the fenced floor
        keys = []
        for _ in range(n):
            h = '%016x' % random.getrandbits(64)
            keys.append(('w2:%s:{%s}' % (h, h[:4]), 'floor-fenced:{%s}:fence' % h[:4]))
        p = r.pipeline(transaction=False)
        for lease, fence in keys: p.evalsha(sha['acquire'], 2, lease, fence, mine[:32], 30000)
        tokens = p.execute()
        p = r.pipeline(transaction=False)
        for (lease, _), token in zip(keys, tokens):
            p.evalsha(sha['release'], 1, lease, '%s %d' % (mine[:32], token), lease + ':released')
        assert all(x == 1 for x in p.execute())
    # Each shape with the scripts it loads: the server holds only those while it is measured
    # (SCRIPT FLUSH before), as a server holds only leasehold's script. Every script a
    # server holds adds to what each Lua garbage collection walks, so measuring with all
    # the variants loaded at once made every script's row dearer.
    shapes = [('floor/rslock (SET NX PX + GET/DEL script)', native, {'release': RELEASE}),
              ('async-redis-lock (2 scripts)', arl, {'lock': ARL_LOCK, 'release': RELEASE}),
              ('fenced floor (benches/load)', fenced, {'acquire': FENCED_ACQUIRE, 'release': FENCED_RELEASE})]
    shapes += [(name, leasehold, {'batch': v}) for name, v in variants.items()]
    for n in [int(x) for x in os.environ.get('NS', '1,4,16,32').split(',')]:
        rounds = max(10, 640 // n) if INSTRUCTIONS else max(200, 6000 // n)
        results = {name: [] for name, _, _ in shapes}
        for rep in range(1 if INSTRUCTIONS else 3):
            for name, fn, scripts in shapes:
                r.script_flush()
                sha = {k: r.script_load(v) for k, v in scripts.items()}
                fn(sha, n)
                c0 = cpu()
                for _ in range(rounds): fn(sha, n)
                results[name].append((cpu() - c0) / (rounds * n) * 1e6)
        for name, _, _ in shapes:
            v = sorted(results[name])
            if INSTRUCTIONS:
                print(f"items/call={n:2d}  {name:45s} {v[0] / 1e6:8.0f} instructions per cycle")
            else:
                print(f"items/call={n:2d}  {name:45s} {v[1]:6.2f} us Redis CPU per cycle (median of 3; {v[0]:.2f}-{v[2]:.2f})")
        sys.stdout.flush()

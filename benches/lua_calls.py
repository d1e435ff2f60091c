"""Redis CPU of one redis.call from Lua, by command: a script that runs it K times, K = 0
and K = 200, per call = difference / 200; and an empty EVALSHA and a native SET NX PX, one
round trip each, for scale. Not part of CI: a developer's tool for docs/performance.md.

    pip install redis
    python3 benches/lua_calls.py

Starts its own redis-server on a free loopback port (no persistence) and stops it by PID.
"""
from scratch_redis import scratch_redis
with scratch_redis() as (r, cpu):
    key = 'leasehold:lease:v2:bench:{abcd}:' + 'ab' * 32
    bodies = {
        'GET (missing key)': "redis.call('GET', KEYS[1])",
        'SET … PX': "redis.call('SET', KEYS[1], ARGV[2], 'PX', 30000)",
        'SET … GET (counter)': "redis.call('SET', KEYS[2], ARGV[2], 'GET')",
        'PUBLISH (no subscriber)': "redis.call('PUBLISH', KEYS[1] .. ':released', 'released')",
        'DEL': "redis.call('DEL', KEYS[1])",
        'TIME': "redis.call('TIME')",
        'string.format + concat (Lua only)': "local x = string.format('%d', 1796223359965023) .. ' ' .. ARGV[2]",
    }
    for name, body in bodies.items():
        sha = r.script_load("for i = 1, tonumber(ARGV[1]) do " + body + " end return 1")
        res = []
        for rep in range(5):
            out = {}
            for k in (0, 200):
                c0 = cpu()
                for _ in range(2000): r.evalsha(sha, 2, key, key[:-64] + 'fence', k, 'AAAA bench 1796223359965023')
                out[k] = cpu() - c0
            res.append((out[200] - out[0]) / (2000 * 200) * 1e6)
        res.sort()
        print(f"{name:36s} {res[2]:.3f} us per call (median of 5; {res[0]:.3f}-{res[4]:.3f})")
    sha = r.script_load("return 1")
    c0 = cpu()
    for _ in range(20000): r.evalsha(sha, 2, key, key, 0, 'x')
    print(f"{'EVALSHA of an empty script':36s} {(cpu()-c0)/20000*1e6:.2f} us per call")
    c0 = cpu()
    for _ in range(20000): r.set('floor:' + str(_), 'tok', nx=True, px=30000)
    print(f"{'native SET NX PX':36s} {(cpu()-c0)/20000*1e6:.2f} us per call (one round trip each)")

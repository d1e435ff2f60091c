#!/usr/bin/env python3
"""Captures the script replies of the `script_reply` seed corpus from a real redis-server.

Starts redis-server (Debian's, as the test suite does) on a free loopback port, runs the
batch script exactly as leasehold sends it (lua/plain.lua, owner, line, acquire, renew,
release, inspect, then batch.lua, joined by newlines) so that every item outcome occurs, and writes
each reply's raw RESP bytes to fuzz/corpus/script_reply/real_<name>.resp. Run it again
after a change to the scripts' replies:

    python3 fuzz/capture_script_replies.py

Hand-made seeds (names not starting with `real_`) are left alone. Under RESP3 (`HELLO 3`,
a URL's `?protocol=resp3`) these replies are the same bytes, so they are captured once.
"""

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus", "script_reply")
PARTS = ["plain", "owner", "line", "acquire", "renew", "release", "inspect", "batch"]

GROUP = "leasehold:lease:v2:jobs:{abcd}"
LEASE = GROUP + ":abcd" + "0" * 60
OTHER = GROUP + ":abcd" + "1" * 60
FENCE = GROUP + ":fence"
LINE = LEASE + ":line"
OWNER_A = "A" * 32
OWNER_B = "B" * 32


def encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def end_of(buf, at=0):
    """Offset just past the RESP value starting at `at`, or None if incomplete."""
    line_end = buf.find(b"\r\n", at)
    if line_end < 0:
        return None
    kind, head = buf[at:at + 1], buf[at + 1:line_end]
    after = line_end + 2
    if kind in b"+-:_,#(":
        return after
    if kind in b"$!=":
        n = int(head)
        if n < 0:
            return after
        return after + n + 2 if len(buf) >= after + n + 2 else None
    if kind in b"*~>%|":
        n = int(head)
        count = max(n, 0) * (2 if kind in b"%|" else 1) + (1 if kind == b"|" else 0)
        for _ in range(count):
            after = end_of(buf, after)
            if after is None:
                return None
        return after
    raise ValueError("unknown RESP type %r" % kind)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def call(self, *args):
        self.sock.sendall(encode(args))
        while True:
            end = end_of(self.buf) if self.buf else None
            if end is not None:
                reply, self.buf = self.buf[:end], self.buf[end:]
                return reply
            self.buf += self.sock.recv(65536)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    script = "\n".join(open(os.path.join(ROOT, "lua", p + ".lua")).read() for p in PARTS)
    port = free_port()
    workdir = tempfile.mkdtemp()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                c = Conn(port)
                break
            except OSError:
                time.sleep(0.05)
        os.makedirs(OUT, exist_ok=True)
        calls = [0]

        def batch(name, keys, argv, conn=None):
            calls[0] += 1
            reply = (conn or c).call("EVAL", script, len(keys), *keys, calls[0], *argv)
            with open(os.path.join(OUT, "real_%s.resp" % name), "wb") as f:
                f.write(reply)
            print(name, reply)

        # Each item: its head (kind letter, then the ttl where it has one, then for an
        # acquisition '-' (a try) or '+' (it waits) and a waiter id) and "<owner> <op> ".
        acquire = lambda owner, op, w="-": (
            [LEASE, FENCE, LINE], ["A30000 %s%s" % (w, hashlib.sha256((owner + op).encode()).hexdigest()[:16]),
                                   "%s %s " % (owner, op)])
        renew = lambda key, owner, op: ([key], ["N30000", "%s %s " % (owner, op)])
        release = lambda key, owner, op: ([key], ["R", "%s %s " % (owner, op)])
        # An inspection also counts the lease's line ("<lease>:line").
        inspect = lambda key, owner, op: ([key, key + ":line"], ["I", "%s %s " % (owner, op)])

        def one(name, item):
            batch(name, *item)

        one("acquire_acquired", acquire(OWNER_A, "op-1"))
        one("acquire_replayed", acquire(OWNER_A, "op-1"))
        one("acquire_conflict", acquire(OWNER_A, "op-2"))
        one("acquire_contended", acquire(OWNER_B, "op-1"))
        one("acquire_contended_in_line", acquire(OWNER_B, "op-1", "+"))
        one("renew_renewed", renew(LEASE, OWNER_A, "op-1"))
        one("renew_not_owner", renew(LEASE, OWNER_B, "op-1"))
        one("renew_absent", renew(OTHER, OWNER_A, "op-1"))
        one("inspect_held_by_attempt", inspect(LEASE, OWNER_A, "op-1"))
        one("inspect_held_by_other", inspect(LEASE, OWNER_B, "op-1"))
        one("inspect_absent", inspect(OTHER, OWNER_A, "op-1"))
        one("release_not_owner", release(LEASE, OWNER_B, "op-1"))
        one("release_released", release(LEASE, OWNER_A, "op-1"))
        one("release_absent", release(LEASE, OWNER_A, "op-1"))

        # A lease without expiry (PTTL -1): refusals and replays report it as it is.
        c.call("SET", LEASE, OWNER_A + " op-1 7")
        one("acquire_contended_no_expiry", acquire(OWNER_B, "op-1"))
        one("acquire_replayed_no_expiry", acquire(OWNER_A, "op-1"))
        c.call("DEL", LEASE)

        # Several items in one call, each with its own reply, one of them an error.
        keys, argv = [], []
        for k, a in [acquire(OWNER_A, "op-1"), renew(LEASE, OWNER_A, "op-1"),
                     inspect(OTHER, OWNER_B, "op-9"), release(OTHER, OWNER_B, "op-9"),
                     release(LEASE, OWNER_A, "op-1")]:
            keys += k
            argv += a
        batch("mixed_five_items", keys, argv)
        c.call("RPUSH", OTHER, "not a lease")
        keys, argv = [], []
        for k, a in [renew(OTHER, OWNER_A, "op-1"), inspect(LEASE, OWNER_A, "op-1")]:
            keys += k
            argv += a
        batch("item_error_wrongtype", keys, argv)
        c.call("DEL", OTHER)

        # Errors of the whole call.
        batch("call_error_unknown_kind", [LEASE], ["X", OWNER_A + " op-1 "])
        batch("call_error_shape", [LEASE], ["N30000"])
        batch("call_error_keys", [LEASE, LEASE], ["N30000", OWNER_A + " op-1 "])
        with open(os.path.join(OUT, "real_call_error_noscript.resp"), "wb") as f:
            f.write(c.call("EVALSHA", "0" * 40, 0, 1))
        c.call("ACL", "SETUSER", "narrow", "on", ">pw", "~other:*", "+@all")
        narrow = Conn(port)
        narrow.call("AUTH", "narrow", "pw")
        batch("call_error_noperm", *acquire(OWNER_A, "op-1"), conn=narrow)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

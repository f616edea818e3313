"""The RESP command sequences LMCache 0.5.6's clients send (its C++ LMCacheRedisClient: AUTH,
SET, GET, EXISTS, DEL, one key each, pipelined; captured byte for byte from the client and
written out here), sent as raw bytes to a real tided's RESP port and to Debian's
redis-server side by side: every reply must be the same bytes (for errors, the same first
word: the texts differ). The replies LMCache's parser accepts are also checked literally:
`+OK` for SET, `$<exact size>` or `$-1` for GET, `:0`/`:1` for EXISTS and DEL.
"""

import os
import socket

import pytest

from conftest import TOKEN


def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def _fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def reply(self):
        """One whole reply, as the bytes on the wire."""
        line = self._line()
        if line[:1] == b"$" and int(line[1:-2]) >= 0:
            need = int(line[1:-2]) + 2
            while len(self.buf) < need:
                self._fill()
            body, self.buf = self.buf[:need], self.buf[need:]
            return line + body
        if line[:1] in (b"*", b"%"):  # an array, or a RESP3 map: twice as many
            n = max(0, int(line[1:-2])) * (2 if line[:1] == b"%" else 1)
            return line + b"".join(self.reply() for _ in range(n))
        return line

    def send(self, data, chunk=None):
        if chunk is None:
            self.s.sendall(data)
        else:
            for i in range(0, len(data), chunk):
                self.s.sendall(data[i:i + chunk])

    def close(self):
        self.s.close()


def run(port, commands, chunk=None, pipelined=True):
    c = Conn(port)
    try:
        if pipelined:
            c.send(b"".join(commands), chunk)
            return [c.reply() for _ in commands]
        out = []
        for one in commands:
            c.send(one, chunk)
            out.append(c.reply())
        return out
    finally:
        c.close()


def same(a, b):
    """Same bytes, or both errors with the same first word."""
    if a[:1] == b"-" and b[:1] == b"-":
        return a.split()[0] == b.split()[0]
    return a == b


def lmcache_sequence(size, n=4):
    """The commands LMCache's client sends for one round of n chunks: set all, check them,
    read them, read a missing one, delete them (twice: :1 then :0)."""
    vals = [os.urandom(size) for _ in range(n)]
    keys = ["model@00000000@0@%064x" % (i + size) for i in range(n)]
    cmds = [cmd("SET", k, v) for k, v in zip(keys, vals)]
    cmds += [cmd("EXISTS", k) for k in keys] + [cmd("EXISTS", "model@missing")]
    cmds += [cmd("GET", k) for k in keys] + [cmd("GET", "model@missing")]
    cmds += [cmd("DEL", k) for k in keys] + [cmd("DEL", k) for k in keys]
    cmds += [cmd("EXISTS", k) for k in keys] + [cmd("GET", keys[0])]
    want = [b"+OK\r\n"] * n + [b":1\r\n"] * n + [b":0\r\n"]
    want += [b"$%d\r\n%s\r\n" % (size, v) for v in vals] + [b"$-1\r\n"]
    want += [b":1\r\n"] * n + [b":0\r\n"] * n + [b":0\r\n"] * n + [b"$-1\r\n"]
    return cmds, want


@pytest.mark.parametrize("size", [20, 4096, 64 << 10, 1 << 20])
@pytest.mark.parametrize("how", ["pipelined", "one-by-one", "split"])
def test_lmcache_commands_same_replies_as_redis(tided, redis, size, how):
    cmds, want = lmcache_sequence(size)
    kw = {"pipelined": how != "one-by-one", "chunk": 7 if how == "split" and size < 8192
          else (65521 if how == "split" else None)}
    got_redis = run(redis, cmds, **kw)
    got_tide = run(tided.resp, cmds, **kw)
    assert got_redis == want  # what LMCache expects is what Redis answers
    for i, (r, t) in enumerate(zip(got_redis, got_tide)):
        assert r == t, f"reply {i} to {cmds[i][:60]!r}: redis {r[:60]!r}, tided {t[:60]!r}"


def test_set_of_existing_key_then_get(tided, redis):
    """LMCache stores a chunk again when it is evicted from L1 and comes back: SET of a
    key that exists answers +OK and GET returns one whole value."""
    a, b = os.urandom(30000), os.urandom(30000)
    cmds = [cmd("SET", "k", a), cmd("SET", "k", b), cmd("GET", "k"), cmd("EXISTS", "k")]
    got_redis, got_tide = run(redis, cmds), run(tided.resp, cmds)
    assert got_redis[:2] == got_tide[:2] == [b"+OK\r\n"] * 2
    assert got_tide[2] in (b"$30000\r\n%s\r\n" % a, b"$30000\r\n%s\r\n" % b)
    assert got_redis[3] == got_tide[3] == b":1\r\n"


def test_auth_same_replies_as_redis(tided_token, redis_token):
    """LMCache sends `AUTH <password>` (no username when its username is empty, as the
    captured client does) before anything else; before it, commands are refused."""
    seqs = [
        [cmd("AUTH", TOKEN), cmd("SET", "a", "x" * 100), cmd("GET", "a"), cmd("DEL", "a")],
        [cmd("AUTH", "default", TOKEN), cmd("EXISTS", "a")],
        [cmd("EXISTS", "a")],
        [cmd("GET", "a")],
        [cmd("SET", "a", "v")],
    ]
    for cmds in seqs:
        r = run(redis_token, cmds)
        t = run(tided_token.resp, cmds)
        for i, (x, y) in enumerate(zip(r, t)):
            assert same(x, y), f"{cmds[i][:40]!r}: redis {x!r}, tided {y!r}"
    assert run(tided_token.resp, seqs[0])[0] == b"+OK\r\n"
    assert run(tided_token.resp, seqs[2])[0].startswith(b"-NOAUTH")


def test_wrong_auth_same_first_word_as_redis(tided_token, redis_token):
    cmds = [cmd("AUTH", "not-the-token")]
    r, t = run(redis_token, cmds)[0], run(tided_token.resp, cmds)[0]
    assert r.startswith(b"-WRONGPASS") and same(r, t), (r, t)


def hello_shape(reply):
    """A HELLO reply without the fields that differ between servers (version, id)."""
    lines = reply.split(b"\r\n")
    fields = {}
    i = 1
    while i + 3 < len(lines) and lines[i].startswith(b"$"):
        k = lines[i + 1]
        v = lines[i + 3] if lines[i + 2].startswith(b"$") else lines[i + 2]
        i += 4 if lines[i + 2].startswith(b"$") else 3
        fields[k] = v
    return lines[0], {k: v for k, v in fields.items() if k in (b"server", b"proto", b"mode")}


@pytest.mark.parametrize("proto", ["2", "3"])
def test_hello_then_lmcache_commands_same_as_redis(tided, redis, proto):
    """redis-py 8 (LMCache's redis:// connector) opens every connection with HELLO 3 and
    then expects RESP3 replies (a miss is `_`, CONFIG GET a map)."""
    cmds, _ = lmcache_sequence(64 << 10)
    cmds = [cmd("HELLO", proto)] + cmds + [cmd("MGET", "model@missing", "x"),
                                          cmd("CONFIG", "GET", "appendonly"),
                                          cmd("CLIENT", "GETNAME")]
    r, t = run(redis, cmds), run(tided.resp, cmds)
    assert hello_shape(r[0]) == hello_shape(t[0])
    assert hello_shape(t[0])[0] == (b"%7" if proto == "3" else b"*14")
    for i in range(1, len(cmds)):
        assert r[i] == t[i], f"{cmds[i][:50]!r}: redis {r[i][:60]!r}, tided {t[i][:60]!r}"
    if proto == "3":
        assert t[-4] == b"_\r\n" and t[-1] == b"_\r\n"


def test_hello_auth_same_as_redis(tided_token, redis_token):
    seqs = [
        [cmd("HELLO", "3", "AUTH", "default", TOKEN), cmd("GET", "a")],
        [cmd("HELLO", "3", "AUTH", "default", "wrong")],
        [cmd("HELLO", "3")],
        [cmd("HELLO", "4")],
        [cmd("HELLO", "3", "AUTH", "default", TOKEN, "SETNAME", "lmc"), cmd("CLIENT", "GETNAME")],
        [cmd("HELLO", "3", "BOGUS")],
    ]
    for cmds in seqs:
        r, t = run(redis_token, cmds), run(tided_token.resp, cmds)
        if r[0][:1] == b"-":
            assert same(r[0], t[0]), (cmds[0], r, t)
        else:
            assert hello_shape(r[0]) == hello_shape(t[0]), (cmds[0], r, t)
        assert r[1:] == t[1:], (cmds, r, t)

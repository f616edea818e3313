#!/usr/bin/python3
"""gen_resp_corpus.py — writes the seed corpus for fuzz_resp into a directory
(`make fuzz-seeds` runs it into tests/fuzz/corpus/resp/, where the files are committed).

Each file is a byte stream as a Redis client would send it. Its name says how parsing it
with the limits of tests/fuzz/resp_check.h ends, and the corpus replay test
(tests/unit/test_resp_corpus.c) holds it to that:
  ok-*          every command parses and nothing is left over
  need-*        the commands parse until one is cut short (more bytes needed)
  err-CODE-*    parsing stops with error CODE (TIDE_EPROTO or TIDE_ELIMIT)
Files of other names need only pass resp_check(): fuzz-* are inputs the fuzzer found.
"""
import os
import sys


def arr(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


SEEDS = {
    "ok-ping": arr("PING"),
    "ok-set-get": arr("SET", "k", "v") + arr("GET", "k"),
    "ok-binary-value": arr("SET", b"bin\x00key", bytes(range(256)) + b"\r\n\r\n"),
    "ok-empty-arg": arr("ECHO", ""),
    "ok-empty-array": b"*0\r\n" + arr("DBSIZE"),
    "ok-mset-mget": arr("MSET", "a", "1", "b", "2") + arr("MGET", "a", "b", "c"),
    "ok-del-many": arr("DEL", *["key%d" % i for i in range(40)]),
    "ok-inline": b"PING\r\nECHO  hello\tworld\n\r\n   \n",
    "ok-pipeline": arr("SET", "x", "1" * 100) * 5 + arr("EXISTS", "x", "y"),
    "ok-bulk-max": arr("SET", "big", b"z" * 4096),
    "ok-max-args": arr(*["a"] * 64),
    "need-array-count": b"*3",
    "need-array-cr": b"*3\r",
    "need-bulk-len": b"*2\r\n$3",
    "need-bulk-data": b"*2\r\n$3\r\nGET\r\n$5\r\nab",
    "need-bulk-crlf": b"*1\r\n$4\r\nPING\r",
    "need-inline": b"PING",
    "need-second": arr("PING") + b"*1\r\n$4\r\nPI",
    "err-TIDE_EPROTO-negative-count": b"*-1\r\n",
    "err-TIDE_EPROTO-negative-bulk": b"*1\r\n$-1\r\n",
    "err-TIDE_EPROTO-count-not-number": b"*x\r\n",
    "err-TIDE_EPROTO-count-empty": b"*\r\n",
    "err-TIDE_EPROTO-bulk-not-number": b"*1\r\n$4a\r\nPING\r\n",
    "err-TIDE_EPROTO-expected-dollar": b"*1\r\n:4\r\nPING\r\n",
    "err-TIDE_EPROTO-cr-without-lf": b"*1\r\x00",
    "err-TIDE_EPROTO-bulk-too-long-data": b"*1\r\n$2\r\nPING\r\n",
    "err-TIDE_EPROTO-bulk-no-lf": b"*1\r\n$4\r\nPING\rX",
    "err-TIDE_EPROTO-20-digits": b"*12345678901234567890\r\n",
    "err-TIDE_EPROTO-overflow": b"*1\r\n$9999999999999999999\r\n",
    "err-TIDE_ELIMIT-too-many-args": b"*65\r\n",
    "err-TIDE_ELIMIT-huge-bulk": b"*1\r\n$4097\r\n",
    "err-TIDE_ELIMIT-huge-bulk-2": b"*2\r\n$3\r\nSET\r\n$999999999999\r\n",
    "err-TIDE_ELIMIT-inline-too-long": b"A" * 1024,
    "err-TIDE_ELIMIT-command-too-big": arr(*(["x" * 4096] * 5)),
    "err-TIDE_EPROTO-after-ok": arr("PING") + b"*1\r\n$x\r\n",
}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_resp_corpus.py DIR")
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(sys.argv[1], name), "wb") as f:
            f.write(data)


main()

#!/usr/bin/python3
# hash-vectors.py — produce the prefix-hash test vectors of tests/unit/test_hash.c
# independently of tide's C code.
#
# It lays out the input bytes exactly as include/tide.h specifies,
#   P[16] || le32(n) || le32(t[0]) || ... || le32(t[n-1]) || le32(|E|) || E
# and hashes them with Python's hashlib (SHA-256, first 16 bytes) and with Debian's
# `xxhsum -H2` (package xxhash) over the bytes written to a temporary file (XXH3-128).
# xxhsum prints the canonical XXH128 form, big-endian high64 then big-endian low64; the
# spec's le64(low64) || le64(high64) is that 16-byte string reversed.
#
# Run with Debian's interpreter: /usr/bin/python3 scripts/hash-vectors.py
import hashlib
import os
import struct
import subprocess
import tempfile


def block_input(parent, toks, extra):
    return (parent + struct.pack('<I', len(toks)) + b''.join(struct.pack('<I', t) for t in toks)
            + struct.pack('<I', len(extra)) + extra)


def xxh3_128(data):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
    try:
        out = subprocess.check_output(['xxhsum', '-H2', f.name]).decode().split()[0]
    finally:
        os.unlink(f.name)
    return bytes.fromhex(out)[::-1]


def sha256_16(data):
    return hashlib.sha256(data).digest()[:16]


Z = bytes(16)
A = [i * 1000 + 7 for i in range(14)] + [0x12345678, 0xFFFFFFFF]
B = [(i * 7919) % 50000 for i in range(16)]
L = [(i * 2654435761) & 0xFFFFFFFF for i in range(1000)]
SALT = b'salt:v1'

for name, f in (('XXH3', xxh3_128), ('SHA256', sha256_16)):
    a = f(block_input(Z, A, b''))
    a_salt = f(block_input(Z, A, SALT))
    b = f(block_input(a, B, b''))
    b_salt = f(block_input(a_salt, B, b''))
    long1000 = f(block_input(Z, L, b''))
    empty = f(block_input(Z, [], b''))
    for n, v in (('A', a), ('A_salt', a_salt), ('B_after_A', b), ('B_after_A_salt', b_salt),
                 ('long1000', long1000), ('empty', empty)):
        print(name, n, v.hex())

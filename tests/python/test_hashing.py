"""Prefix hashing through the binding, checked against an independent reading of the
chain include/tide.h specifies, plus hash_hex, size_parse and version."""

import hashlib
import struct

import numpy as np
import pytest

import tide

# The spec's inputs (the same as tests/unit/test_hash.c).
A = [i * 1000 + 7 for i in range(14)] + [0x12345678, 0xFFFFFFFF]
B = [(i * 7919) % 50000 for i in range(16)]
SALT = b"salt:v1"

# XXH3-128 vectors from tests/unit/test_hash.c, produced there with Debian's xxhsum.
XXH3 = {
    "a": "3a2c368dca2e91cb9bbcf99e67df2b0b",
    "a_salt": "279a340f8a41c9eb297bca76992f669d",
    "b_after_a": "25b73fb95ef6631ca35df5fd043503c0",
}


def ref_block(parent, tokens, extra=b""):
    """SHA-256 variant of the chain, written from the header's text with hashlib."""
    data = (parent or bytes(16)) + struct.pack(f"<I{len(tokens)}I", len(tokens), *tokens)
    data += struct.pack("<I", len(extra)) + extra
    return hashlib.sha256(data).digest()[:16]


def ref_chain(tokens, block, extra=b""):
    out, parent = [], None
    for i in range(len(tokens) // block):
        parent = ref_block(parent, tokens[i * block : (i + 1) * block], extra if i == 0 else b"")
        out.append(parent)
    return out


def test_sha256_chain_matches_an_independent_implementation():
    tokens = A + B + [99] * 5
    assert tide.prefix_hashes(tokens, 16, algo="sha256") == ref_chain(tokens, 16)
    assert tide.prefix_hashes(tokens, 16, algo="sha256", extra=SALT) == ref_chain(tokens, 16, SALT)
    assert tide.prefix_hashes(tokens, 8, algo="sha256", extra="salt:v1") == ref_chain(
        tokens, 8, SALT
    )
    assert tide.block_hash(B, parent=ref_block(None, A), algo="sha256") == ref_block(
        ref_block(None, A), B
    )


def test_xxh3_vectors():
    hs = tide.prefix_hashes(A + B, 16)  # xxh3 is the default
    assert [tide.hash_hex(h) for h in hs] == [XXH3["a"], XXH3["b_after_a"]]
    assert tide.hash_hex(tide.prefix_hashes(A, 16, extra=SALT)[0]) == XXH3["a_salt"]
    assert tide.hash_hex(tide.block_hash(A)) == XXH3["a"]
    assert tide.hash_hex(tide.block_hash(B, parent=bytes.fromhex(XXH3["a"]))) == XXH3["b_after_a"]
    assert tide.block_hash(A, parent=bytes(16)) == tide.block_hash(A)


def test_token_containers_agree():
    tokens = A + B
    want = tide.prefix_hashes(tokens, 16)
    assert tide.prefix_hashes(np.array(tokens, dtype=np.uint32), 16) == want  # zero copy
    assert tide.prefix_hashes(np.array(tokens, dtype=np.int64), 16) == want  # converted
    assert tide.prefix_hashes(tuple(tokens), 16) == want
    assert tide.prefix_hashes(iter(tokens), 16) == want


def test_partial_blocks_and_max_hashes():
    tokens = list(range(50))
    assert len(tide.prefix_hashes(tokens, 16)) == 3
    assert tide.prefix_hashes(tokens[:15], 16) == []
    assert tide.prefix_hashes([], 16) == []
    assert tide.prefix_hashes(tokens, 16, max_hashes=2) == tide.prefix_hashes(tokens, 16)[:2]
    assert tide.prefix_hashes(tokens, 16, max_hashes=0) == []


def test_shared_prefix_property():
    s1 = [i * 31 + 5 for i in range(128)]
    s2 = list(s1)
    s2[16 * 5 + 3] ^= 1
    h1, h2 = tide.prefix_hashes(s1, 16), tide.prefix_hashes(s2, 16)
    assert [a == b for a, b in zip(h1, h2)] == [True] * 5 + [False] * 3


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: tide.prefix_hashes([1, 2], 0), "block_tokens must be a positive int"),
        (lambda: tide.prefix_hashes([1, -2], 1), r"0\.\.2\*\*32-1"),
        (lambda: tide.prefix_hashes([1, 2**32], 1), r"0\.\.2\*\*32-1"),
        (lambda: tide.prefix_hashes([1.5], 1), "expected integers"),
        (lambda: tide.prefix_hashes(np.ones(4), 1), "format 'd'"),
        (lambda: tide.prefix_hashes([1], 1, algo="md5"), "unknown hash algorithm 'md5'"),
        (lambda: tide.block_hash([1], parent=b"short"), "parent must be 16 bytes, got 5"),
        (lambda: tide.hash_hex(b"\x00" * 15), "a hash is 16 bytes, got 15"),
    ],
)
def test_bad_arguments(call, match):
    with pytest.raises(tide.InvalidArgument, match=match):
        call()


def test_hash_hex():
    assert tide.hash_hex(bytes(i * 17 for i in range(16))) == "00112233445566778899aabbccddeeff"
    assert tide.hash_hex(bytearray(16)) == "0" * 32


def test_size_parse():
    assert tide.size_parse("4096") == 4096
    assert tide.size_parse("512MB") == 512 * 10**6
    assert tide.size_parse("1GiB") == 1 << 30
    assert tide.size_parse("1.5 KiB") == 1536
    with pytest.raises(tide.ConfigError) as ei:
        tide.size_parse("lots")
    assert ei.value.code == tide.ESIZE and "'lots'" in ei.value.message
    with pytest.raises(tide.InvalidArgument):
        tide.size_parse(4096)


def test_version():
    parts = tide.version().split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)

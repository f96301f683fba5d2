"""Cost of the candidate per-message MACs for the collective transport, on this machine.

    python bench/mac.py            # 64 B, 4 KiB and 512 KiB messages; single thread and two threads

Each candidate computes a 16-byte (or longer) tag over (sequence number, message). A message of 64 B is
a collective header, 4 KiB the latency path's payload, 512 KiB one ring pipeline segment. "2 threads"
runs two threads that each MAC their own buffer at once, as the send and receive threads of a rank do:
a candidate that holds the GIL shows no gain there.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
import time
from collections.abc import Callable

KEY = os.urandom(32)
_SEQ = struct.Struct("!Q")


def candidates() -> dict[str, Callable[[int, memoryview], bytes]]:
    """name -> tag(seq, message)."""
    found: dict[str, Callable[[int, memoryview], bytes]] = {}

    def hmac_sha256(seq: int, data: memoryview) -> bytes:
        mac = hmac.new(KEY, _SEQ.pack(seq), "sha256")
        mac.update(data)
        return mac.digest()[:16]

    def blake2b_keyed(seq: int, data: memoryview) -> bytes:
        mac = hashlib.blake2b(_SEQ.pack(seq), key=KEY, digest_size=16)
        mac.update(data)
        return mac.digest()

    def memcpy(seq: int, data: memoryview) -> bytes:
        bytearray(data)
        return b""

    found["(calibration: a copy of the message)"] = memcpy
    found["hmac-sha256 (OpenSSL)"] = hmac_sha256
    found["blake2b keyed"] = blake2b_keyed
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
        from cryptography.hazmat.primitives.poly1305 import Poly1305
    except ImportError:
        return found
    gcm = AESGCM(KEY)
    gcm128 = AESGCM(KEY[:16])
    chacha = ChaCha20Poly1305(KEY)
    zeros = bytes(32)

    def poly1305_chacha_otk(seq: int, data: memoryview) -> bytes:
        nonce = struct.pack("<QQ", 0, seq)
        otk = Cipher(algorithms.ChaCha20(KEY, nonce), mode=None).encryptor().update(zeros)
        mac = Poly1305(otk)
        mac.update(data)
        return mac.finalize()

    def poly1305_blake_otk(seq: int, data: memoryview) -> bytes:
        otk = hashlib.blake2b(_SEQ.pack(seq), key=KEY, digest_size=32).digest()
        mac = Poly1305(otk)
        mac.update(data)
        return mac.finalize()

    def aes_gcm_aad(seq: int, data: memoryview) -> bytes:
        return gcm.encrypt(struct.pack("!IQ", 0, seq), b"", data)

    def chacha_poly_aad(seq: int, data: memoryview) -> bytes:
        return chacha.encrypt(struct.pack("!IQ", 0, seq), b"", data)

    found["poly1305, one-time key from ChaCha20"] = poly1305_chacha_otk
    found["poly1305, one-time key from blake2b(seq)"] = poly1305_blake_otk
    def aes128_gcm_aad(seq: int, data: memoryview) -> bytes:
        return gcm128.encrypt(struct.pack("!IQ", 0, seq), b"", data)

    found["AES-256-GCM tag over AAD"] = aes_gcm_aad
    found["AES-128-GCM tag over AAD"] = aes128_gcm_aad
    found["ChaCha20-Poly1305 tag over AAD"] = chacha_poly_aad
    return found


def per_call(tag: Callable[[int, memoryview], bytes], data: memoryview, threads: int) -> float:
    """Seconds per tag, each of `threads` threads tagging its own copy of data at once."""
    n = max(20, min(20000, (64 << 20) // max(len(data), 1)))
    buffers = [memoryview(bytearray(data)) for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    spent = [0.0] * threads

    def work(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        for seq in range(n):
            tag(seq, buffers[i])
        spent[i] = time.perf_counter() - t0

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    t0 = time.perf_counter()
    start.wait()
    for w in workers:
        w.join()
    return (time.perf_counter() - t0) / (n * threads)


def main() -> None:
    sizes = [64, 4 << 10, 512 << 10]
    print(f"{'candidate':42s} " + "  ".join(f"{s:>9d} B" for s in sizes) + "   512 KiB, 2 threads")
    for name, tag in candidates().items():
        cells = []
        for size in sizes:
            data = memoryview(os.urandom(size))
            tag(0, data)
            seconds = min(per_call(tag, data, 1) for _ in range(3))
            cells.append(f"{seconds * 1e6:8.2f}us" if size < 1 << 16 else f"{size / seconds / 1e9:7.2f}GB/s")
        both = min(per_call(tag, memoryview(os.urandom(512 << 10)), 2) for _ in range(2))
        print(f"{name:42s} " + "  ".join(f"{c:>11s}" for c in cells) + f"   {(512 << 10) / both / 1e9:7.2f}GB/s")


if __name__ == "__main__":
    main()

"""Hypothesis strategies that damage valid SPIR-V: bit flips, word insertions and
deletions, word overwrites, truncations (at any byte and at instruction boundaries), id
swaps, and random bytes (with and without a valid header)."""
from __future__ import annotations

import struct

from hypothesis import strategies as st

from tests.fuzz.corpus import boundaries

MAGIC = 0x07230203
# Words worth trying: small numbers, ids near the bound, opcodes with plausible word
# counts (OpFunction, OpFunctionEnd, OpLabel, OpReturn, OpBranch, OpStore, OpLoad...).
_INTERESTING = [0, 1, 2, 3, 4, 5, 0xFFFF, 0x10000, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000,
                (5 << 16) | 54, (1 << 16) | 56, (2 << 16) | 248, (1 << 16) | 253,
                (2 << 16) | 249, (3 << 16) | 62, (4 << 16) | 61, (4 << 16) | 65,
                (3 << 16) | 71, (4 << 16) | 15, (0 << 16) | 61]


def _word(draw: st.DrawFn, w: list[int]) -> int:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.sampled_from(_INTERESTING))
    if choice == 1:
        bound = w[3] if len(w) > 3 else 1
        return draw(st.integers(0, bound + 2))             # an id, possibly past the bound
    if choice == 2 and len(w) > 5:
        return w[draw(st.integers(5, len(w) - 1))]        # a word from elsewhere
    return draw(st.integers(0, 2**32 - 1))


@st.composite
def mutate(draw: st.DrawFn, base: bytes) -> tuple[bytes, str]:
    """One to three damages applied to `base`; (module bytes, what was done)."""
    w = list(struct.unpack(f"<{len(base) // 4}I", base))
    notes = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "overwrite", "cut_byte",
                                     "cut_boundary", "swap_ids", "random_tail"]))
        n = len(w)
        if n == 0:
            break
        if kind == "flip":
            i = draw(st.integers(0, n - 1))
            bit = draw(st.integers(0, 31))
            w[i] ^= 1 << bit
            notes.append(f"flip word {i} bit {bit}")
        elif kind == "insert":
            i = draw(st.integers(0, n))
            new = [_word(draw, w) for _ in range(draw(st.integers(1, 4)))]
            w[i:i] = new
            notes.append(f"insert {new} at word {i}")
        elif kind == "delete":
            i = draw(st.integers(0, n - 1))
            k = draw(st.integers(1, 4))
            del w[i:i + k]
            notes.append(f"delete {k} words at {i}")
        elif kind == "overwrite":
            i = draw(st.integers(0, n - 1))
            w[i] = _word(draw, w)
            notes.append(f"word {i} = {w[i]:#x}")
        elif kind == "cut_byte":
            cut = draw(st.integers(0, 4 * n - 1))
            data = struct.pack(f"<{n}I", *w)[:cut]
            notes.append(f"cut at byte {cut}")
            return data, "; ".join(notes)      # possibly not whole words: stop here
        elif kind == "cut_boundary":
            data = struct.pack(f"<{n}I", *w)
            try:
                cuts = boundaries(data)
            except Exception:
                cuts = []
            cut = draw(st.sampled_from(cuts)) if cuts else draw(st.integers(0, n))
            del w[cut:]
            notes.append(f"cut at word {cut}")
        elif kind == "swap_ids":
            bound = max(2, w[3] if n > 3 else 2)
            a = draw(st.integers(1, bound - 1))
            b = draw(st.integers(1, bound - 1))
            w[5:] = [b if x == a else a if x == b else x for x in w[5:]]
            notes.append(f"swap ids {a} and {b}")
        else:   # random_tail
            i = draw(st.integers(0, n))
            tail = draw(st.binary(min_size=0, max_size=64))
            data = struct.pack(f"<{i}I", *w[:i]) + tail
            notes.append(f"random bytes after word {i}: {tail.hex()}")
            return data, "; ".join(notes)
    return struct.pack(f"<{len(w)}I", *w), "; ".join(notes)


@st.composite
def random_module(draw: st.DrawFn) -> tuple[bytes, str]:
    """Random bytes, half of them behind a plausible header."""
    body = draw(st.binary(min_size=0, max_size=256))
    if draw(st.booleans()):
        header = struct.pack("<5I", MAGIC, draw(st.sampled_from([0x10000, 0x10300, 0x10600])),
                             0, draw(st.integers(1, 64)), 0)
        body = header + body[: len(body) // 4 * 4]
    return body, f"random bytes {body.hex()}"

#!/usr/bin/python3
"""gguf_split.py - split GGUF files written independently of q35 (its own reader and writer, from
the GGUF specification and llama.cpp's gguf-split conventions), and a shard checker.

  gguf_split.py split IN.gguf OUT_PREFIX --max-tensors N [--no-tensor-first-split]
                [--patch SHARD:KEY=VALUE ...] [--dup-tensor]
      writes OUT_PREFIX-%05d-of-%05d.gguf: shard 1 holds every metadata pair of IN, each shard
      split.no (u16, 0-based), split.count (u16), split.tensors.count (i32), N tensors per shard
      (none in shard 1 with --no-tensor-first-split, as gguf-split's option of that name). Unlike
      q35's writer, the split.* keys come FIRST. --patch overwrites a split key of a shard
      (1-based SHARD) with an integer of the same type, to make corrupt sets; --dup-tensor repeats
      shard 2's first tensor in shard 3.
  gguf_split.py check PREFIX N MAX_BYTES MAX_TENSORS
      the N shards PREFIX-*-of-N.gguf follow the conventions: split keys and their types, all other
      metadata in shard 1 only, tensors' data padded within MAX_BYTES per shard (0: no limit;
      a shard of one tensor may exceed it), at most MAX_TENSORS (0: no limit), tensor total.
      Prints one line; exit 1 on a violation.
"""
import struct
import sys

ALIGN = 32
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {2: "<H", 5: "<i", 4: "<I"}


def skip_value(d, p, t):
    if t in SCALAR:
        return p + SCALAR[t]
    if t == 8:
        (n,) = struct.unpack_from("<Q", d, p)
        return p + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", d, p)
        p += 12
        if et in SCALAR:
            return p + SCALAR[et] * n
        for _ in range(n):
            p = skip_value(d, p, et)
        return p
    raise SystemExit(f"bad value type {t}")


def parse(path):
    """-> (kvs [(key, type, raw bytes of key+type+value)], tensors [(name, dims, type, data)])."""
    d = open(path, "rb").read()
    assert d[:4] == b"GGUF", path
    _, n_t, n_kv = struct.unpack_from("<IQQ", d, 4)
    p = 24
    kvs = []
    for _ in range(n_kv):
        start = p
        (n,) = struct.unpack_from("<Q", d, p)
        key = d[p + 8:p + 8 + n].decode()
        p += 8 + n
        (t,) = struct.unpack_from("<I", d, p)
        p = skip_value(d, p + 4, t)
        kvs.append((key, t, d[start:p], start + 8 + len(key) + 4))
    infos = []
    for _ in range(n_t):
        (n,) = struct.unpack_from("<Q", d, p)
        name = d[p + 8:p + 8 + n].decode()
        p += 8 + n
        (nd,) = struct.unpack_from("<I", d, p)
        dims = struct.unpack_from(f"<{nd}Q", d, p + 4)
        p += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", d, p)
        p += 12
        infos.append((name, dims, t, off))
    align = ALIGN
    for key, t, raw, vpos in kvs:
        if key == "general.alignment":
            (align,) = struct.unpack_from("<I", d, vpos)
    data0 = (p + align - 1) // align * align
    # a tensor's bytes: up to the next tensor's offset (its padding included), the last to the end
    offs = sorted(off for *_, off in infos) + [len(d) - data0]
    nxt = {offs[i]: offs[i + 1] for i in range(len(offs) - 1)}
    tensors = [(name, dims, t, d[data0 + off:data0 + nxt[off]]) for name, dims, t, off in infos]
    return kvs, tensors, align, d


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_raw(key, t, v):
    return gstr(key) + struct.pack("<I", t) + struct.pack(FMT[t], v)


def pad(n):
    return (ALIGN - n % ALIGN) % ALIGN


def write_shard(path, kvs_raw, tensors):
    infos, data = b"", b""
    for name, dims, t, blob in tensors:
        infos += gstr(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", t, len(data))
        data += blob + b"\0" * pad(len(blob))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs_raw)) + b"".join(kvs_raw) + infos
    head += b"\0" * pad(len(head))
    with open(path, "wb") as f:
        f.write(head + data)


def split(args):
    src, prefix = args[0], args[1]
    max_t, empty_first, patches, dup = 0, False, {}, False
    i = 2
    while i < len(args):
        a = args[i]
        if a == "--max-tensors":
            max_t = int(args[i + 1])
            i += 1
        elif a == "--no-tensor-first-split":
            empty_first = True
        elif a == "--patch":
            shard, kv = args[i + 1].split(":")
            key, val = kv.split("=")
            patches.setdefault(int(shard) - 1, {})[key] = int(val)
            i += 1
        elif a == "--dup-tensor":
            dup = True
        else:
            raise SystemExit(f"unknown option {a}")
        i += 1
    kvs, tensors, align, _ = parse(src)
    assert align == ALIGN, "inputs aligned to 32 only"
    groups = [[]] if empty_first else []
    for k in range(0, len(tensors), max_t):
        groups.append(tensors[k:k + max_t])
    if dup:
        groups[2] = groups[2] + [groups[1][0]]
    n = len(groups)
    total = sum(len(g) for g in groups)
    for k, g in enumerate(groups):
        vals = {"split.no": (2, k), "split.count": (2, n), "split.tensors.count": (5, total)}
        for key, v in patches.get(k, {}).items():
            vals[key] = (vals[key][0], v)
        raw = [kv_raw(key, t, v) for key, (t, v) in vals.items()]
        if k == 0:
            raw += [r for key, t, r, _ in kvs if not key.startswith("split.")]
        write_shard(f"{prefix}-{k + 1:05d}-of-{n:05d}.gguf", raw, g)
    print(n)


def check(args):
    prefix, n, max_bytes, max_t = args[0], int(args[1]), int(args[2]), int(args[3])
    bad, total, counts = [], 0, []
    want_total = None
    for k in range(n):
        path = f"{prefix}-{k + 1:05d}-of-{n:05d}.gguf"
        kvs, tensors, align, _ = parse(path)
        d = open(path, "rb").read()
        got = {key: (t, struct.unpack_from(FMT[t], d, vpos)[0]) for key, t, raw, vpos in kvs
               if key.startswith("split.")}
        if got.get("split.no") != (2, k) or got.get("split.count") != (2, n):
            bad.append(f"{path}: split.no / split.count {got}")
        if got.get("split.tensors.count", (None,))[0] != 5:
            bad.append(f"{path}: split.tensors.count must be an i32: {got}")
        want_total = got.get("split.tensors.count", (0, 0))[1]
        others = [key for key, *_ in kvs if not key.startswith("split.")]
        if k == 0 and "general.architecture" not in others:
            bad.append(f"{path}: the first shard lacks the metadata")
        if k > 0 and others:
            bad.append(f"{path}: metadata outside the first shard: {others[:3]}")
        size = sum(len(b) for *_, b in tensors)
        if max_bytes and size > max_bytes and len(tensors) > 1:
            bad.append(f"{path}: {size} bytes of tensor data > {max_bytes}")
        if max_t and len(tensors) > max_t:
            bad.append(f"{path}: {len(tensors)} tensors > {max_t}")
        if not tensors:
            bad.append(f"{path}: no tensors")
        total += len(tensors)
        counts.append(len(tensors))
    if want_total != total:
        bad.append(f"split.tensors.count {want_total} != {total} tensors")
    for b in bad:
        print("FAIL", b)
    print(f"{n} shards, tensors per shard {counts}, {total} in all")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"split": split, "check": check}[sys.argv[1]](sys.argv[2:])

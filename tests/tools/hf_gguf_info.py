#!/usr/bin/python3
"""Print a GGUF file's metadata and tensor table as JSON (independent parser, test tooling).

usage: hf_gguf_info.py FILE.gguf
Output: {"kv": {key: value}, "tensors": {name: {"type": ggml_type_id, "ne": [...], "offset": file offset}}}; arrays of more
than 16 elements are given as {"array_len": n, "first": [...16 elements]}.
"""
import json
import mmap
import struct
import sys

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def main():
    f = open(sys.argv[1], "rb")
    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, data, off)[0]
        off += struct.calcsize(fmt)
        return v

    def string():
        nonlocal off
        n = take("<Q")
        s = bytes(data[off:off + n]).decode("utf-8", "replace")
        off += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et = take("<I")
            n = take("<Q")
            vals = [value(et) for _ in range(n)]
            return vals if n <= 16 else {"array_len": n, "first": vals[:16]}
        return take(SCALAR[t])

    assert data[:4] == b"GGUF", "not a GGUF file"
    off = 4
    take("<I")
    nt = take("<Q")
    nkv = take("<Q")
    kv = {}
    for _ in range(nkv):
        k = string()
        kv[k] = value(take("<I"))
    tens = {}
    for _ in range(nt):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        ty = take("<I")
        tens[name] = {"type": ty, "ne": ne, "offset": take("<Q")}
    align = kv.get("general.alignment", 32)
    base = (off + align - 1) // align * align
    for t in tens.values():  # absolute file offset of the data
        t["offset"] += base
    json.dump({"kv": kv, "tensors": tens}, sys.stdout)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""gguf_kv.py FILE [PREFIX] - print a GGUF file's metadata pairs under PREFIX as JSON
{key: [type name, value]} (arrays as [type, "array"]). A reader written from the GGUF
specification alone, independent of q35's own (src/format/gguf_read.c)."""
import json
import struct
import sys

TYPES = {0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"), 4: ("u32", "<I"),
         5: ("i32", "<i"), 6: ("f32", "<f"), 7: ("bool", "<?"), 10: ("u64", "<Q"), 11: ("i64", "<q"),
         12: ("f64", "<d")}


def main():
    path, prefix = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    with open(path, "rb") as f:
        data = f.read(1 << 26)  # the metadata comes first; 64 MiB covers any tokenizer block
    if data[:4] != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    pos = 4 + 4 + 8
    (n_kv,) = struct.unpack_from("<Q", data, pos)
    pos += 8

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8:p + 8 + n].decode("utf-8", "replace"), p + 8 + n

    def value(t, p):
        if t == 8:
            return string(p)
        if t == 9:
            (et, n) = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(n):
                _, p = value(et, p)
            return "array", p
        fmt = TYPES[t][1]
        return struct.unpack_from(fmt, data, p)[0], p + struct.calcsize(fmt)

    out = {}
    for _ in range(n_kv):
        key, pos = string(pos)
        (t,) = struct.unpack_from("<I", data, pos)
        v, pos = value(t, pos + 4)
        if key.startswith(prefix):
            out[key] = [TYPES[t][0] if t in TYPES else ("str" if t == 8 else "array"), v]
    print(json.dumps(out, sort_keys=True))


main()

"""Interop oracle for the Lance 2.0 file format, driven by the Rust tests.

  python3 pylance_file.py write DIR [VERSION]
                                      pylance writes files of VERSION (default
                                      2.0; also 2.1, 2.2) + Arrow IPC copies
  python3 pylance_file.py check DIR   pylance reads every DIR/*.lance and compares
                                      it (whole, by range and by take) with DIR/*.arrow
"""
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401
from lance.file import LanceFileReader, LanceFileWriter


def tables():
    rng = np.random.default_rng(42)
    n = 3000

    def nulls(arr, p=0.2):
        mask = pa.array(rng.random(len(arr)) < p)
        try:
            return pa.compute.if_else(mask, pa.scalar(None, arr.type), arr)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            return pa.array(arr.to_pylist(), arr.type, mask=mask.to_numpy(zero_copy_only=False))

    words = ["alpha", "beta", "gamma", "", "delta"]
    cols = {
        "b": nulls(pa.array(rng.random(n) < 0.5)),
        "i8": nulls(pa.array(rng.integers(-100, 100, n), pa.int8())),
        "i16": nulls(pa.array(rng.integers(-1000, 1000, n), pa.int16())),
        "i32": nulls(pa.array(rng.integers(-1 << 30, 1 << 30, n), pa.int32())),
        "i64": nulls(pa.array(rng.integers(-1 << 60, 1 << 60, n), pa.int64())),
        "u8": nulls(pa.array(rng.integers(0, 255, n), pa.uint8())),
        "u16": nulls(pa.array(rng.integers(0, 60000, n), pa.uint16())),
        "u32": nulls(pa.array(rng.integers(0, 1 << 31, n), pa.uint32())),
        "u64": nulls(pa.array(rng.integers(0, 1 << 62, n), pa.uint64())),
        "f16": nulls(pa.array(rng.random(n).astype(np.float16))),
        "f32": nulls(pa.array(rng.random(n).astype(np.float32))),
        "f64": nulls(pa.array(rng.random(n))),
        "d32": nulls(pa.array(rng.integers(0, 40000, n).astype("int32"), pa.date32())),
        "d64": nulls(pa.array(rng.integers(0, 1 << 40, n) // 86400000 * 86400000, pa.date64())),
        "t32": nulls(pa.array(rng.integers(0, 86400, n).astype("int32"), pa.time32("s"))),
        "t64": nulls(pa.array(rng.integers(0, 86400 * 10**6, n), pa.time64("us"))),
        "ts_s": nulls(pa.array(rng.integers(0, 2 * 10**9, n), pa.timestamp("s"))),
        "ts_ms_utc": nulls(pa.array(rng.integers(0, 2 * 10**12, n), pa.timestamp("ms", tz="UTC"))),
        "ts_us_ny": nulls(pa.array(rng.integers(0, 2 * 10**15, n), pa.timestamp("us", tz="America/New_York"))),
        "ts_ns": nulls(pa.array(rng.integers(0, 2 * 10**18, n), pa.timestamp("ns"))),
        "s": nulls(pa.array(["x" * int(k) for k in rng.integers(0, 30, n)])),
        "s_dict": nulls(pa.array([words[k] for k in rng.integers(0, 5, n)])),
        "ls": nulls(pa.array([words[k] * 3 for k in rng.integers(0, 5, n)], pa.large_string())),
        "bin": nulls(pa.array([bytes(rng.integers(0, 255, int(k)).astype("uint8")) for k in rng.integers(0, 9, n)], pa.binary())),
        "lbin": nulls(pa.array([b"z" * int(k) for k in rng.integers(0, 9, n)], pa.large_binary())),
        "fsb": nulls(pa.array([bytes(rng.integers(0, 255, 6).astype("uint8")) for _ in range(n)], pa.binary(6))),
        "vec": nulls(pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16).astype(np.float32)), 16)),
        "l": nulls(pa.array([list(range(int(k))) for k in rng.integers(0, 4, n)], pa.list_(pa.int64()))),
        "ll": nulls(pa.array([[["a"] * int(k), []] for k in rng.integers(0, 3, n)], pa.large_list(pa.list_(pa.string())))),
        "st": pa.StructArray.from_arrays(
            [nulls(pa.array(rng.integers(0, 9, n))), nulls(pa.array([words[k] for k in rng.integers(0, 5, n)]))],
            names=["x", "y"],
        ),
        "lst": pa.array([[{"a": int(k)}] * int(k % 3) if k % 5 else None for k in rng.integers(0, 100, n)],
                        pa.list_(pa.struct([("a", pa.int32())]))),
        "allnull": pa.array([None] * n, pa.int32()),
        "allnull_s": pa.array([None] * n, pa.string()),
    }
    full = pa.table(cols)
    yield "all_types", full, None
    yield "all_types_small_pages", full, 2000
    yield "empty_strings", pa.table({"s": pa.array([""] * 50 + [None] * 50)}), None
    # Values of 256 bytes and more (2.1+ stores them zipped, not in
    # mini-blocks), and enough rows for many chunks and pages.
    m = 20000
    wide = {
        "id": pa.array(np.arange(m, dtype=np.int64) * 3),
        "vec": nulls(pa.FixedSizeListArray.from_arrays(pa.array(rng.random(m * 128).astype(np.float32)), 128)),
        "doc": nulls(pa.array(["w%d " % k * int(k % 97 + 40) for k in rng.integers(0, 10**6, m)])),
        "ldoc": nulls(pa.array([["z" * int(k)] * int(k % 3) for k in rng.integers(250, 400, m)], pa.list_(pa.string()))),
        "cat": pa.array(["c%d" % k for k in rng.integers(0, 8, m)]),
        "f": nulls(pa.array(rng.random(m))),
    }
    yield "wide", pa.table(wide), 1 << 20
    # One empty list early on: the layer is "emptyable" on every page, and
    # a page without an empty list packs its all-zero definition levels
    # into 0 bits (flat values of width 0, as pylance's HNSW graphs hold).
    k = 20000
    lens = rng.integers(1, 20, k)
    lens[3] = 0
    item = pa.field("item", pa.uint32(), nullable=False)
    lists = pa.array([list(rng.integers(0, 1000, int(j)).astype("uint32")) for j in lens], pa.list_(item))
    # Rows longer than a mini-block chunk (lists of thousands of items among
    # short, empty and null ones): rows span chunks, whole chunks are the
    # middle of one row, and a take must follow the repetition index.
    k = 3000
    lens = rng.integers(0, 30, k)
    lens[::41] = rng.integers(2000, 9000, len(lens[::41]))
    longs = nulls(pa.array([list(rng.integers(0, 1 << 40, int(j))) for j in lens], pa.list_(pa.int64())), 0.1)
    words_l = nulls(pa.array([[words[int(x) % 5] for x in rng.integers(0, 5, int(j) // 4)] for j in lens],
                             pa.list_(pa.string())), 0.1)
    yield "long_lists", pa.table({"l": longs, "ls": words_l}), None
    yield "rare_empty_lists", pa.table({"l": lists}, schema=pa.schema([pa.field("l", lists.type, nullable=False)])), None


def write(d, version="2.0"):
    os.makedirs(d, exist_ok=True)
    for name, t, page in tables():
        kwargs = {"max_page_bytes": page} if page else {}
        with LanceFileWriter(os.path.join(d, name + ".lance"), t.schema, version=version, **kwargs) as w:
            for b in t.to_batches(max_chunksize=1000):
                w.write_batch(b)
        with pa.OSFile(os.path.join(d, name + ".arrow"), "wb") as f:
            with pa.ipc.new_file(f, t.schema) as w:
                w.write_table(t)
    print("wrote", d)


def check(d):
    bad = 0
    names = sorted(f[:-6] for f in os.listdir(d) if f.endswith(".lance"))
    for name in names:
        expected = pa.ipc.open_file(os.path.join(d, name + ".arrow")).read_all()
        r = LanceFileReader(os.path.join(d, name + ".lance"))
        got = r.read_all().to_table()
        ok = got.equals(expected)
        n = expected.num_rows
        if ok and n > 2:
            idx = sorted(set([0, n - 1, n // 2, n // 3]))
            ok = r.take_rows(idx).to_table().equals(expected.take(idx))
            ok = ok and r.read_range(1, n - 2).to_table().equals(expected.slice(1, n - 2))
        print(("ok  " if ok else "BAD ") + name, n, "rows")
        if not ok:
            bad += 1
            for c in expected.column_names:
                if not got.column(c).equals(expected.column(c)):
                    print("   column", c, got.schema.field(c), expected.schema.field(c))
    if not names:
        print("no files in", d)
        bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](*sys.argv[2:])

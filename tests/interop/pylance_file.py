"""Interop oracle for the Lance 2.0 file format, driven by the Rust tests.

  python3 pylance_file.py write DIR [VERSION]
                                      pylance writes files of VERSION (default
                                      2.0; also 2.1, 2.2, which add random
                                      schemas) + Arrow IPC copies
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


def random_type(rng, depth):
    """A random Arrow type: every leaf type the tests use, and (while depth
    allows) lists, large lists, structs and fixed-size lists of them."""
    leaves = [pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(),
              pa.uint64(), pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(),
              pa.date32(), pa.timestamp("us"), pa.binary(4)]
    k = rng.integers(0, 5) if depth > 0 else 0
    if k == 1:
        return pa.list_(random_type(rng, depth - 1))
    if k == 2:
        return pa.large_list(random_type(rng, depth - 1))
    if k == 3:
        return pa.struct([("f%d" % i, random_type(rng, depth - 1)) for i in range(int(rng.integers(1, 4)))])
    if k == 4:
        return pa.list_(pa.float32(), int(rng.integers(2, 9)))
    return leaves[int(rng.integers(0, len(leaves)))]


def random_values(rng, t, n, p_null):
    """n random values of type t (Python objects), null with p_null at every level."""
    def one(t):
        if rng.random() < p_null:
            return None
        if pa.types.is_boolean(t):
            return bool(rng.random() < 0.5)
        if pa.types.is_integer(t):
            bits = t.bit_width - (0 if pa.types.is_unsigned_integer(t) else 1)
            hi = 1 << min(bits, 62)
            lo = 0 if pa.types.is_unsigned_integer(t) else -hi
            return int(rng.integers(lo, hi))
        if pa.types.is_floating(t):
            return float(rng.random() * 1000)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "".join(chr(97 + int(c)) for c in rng.integers(0, 6, int(rng.integers(0, 40))))
        if pa.types.is_fixed_size_binary(t):
            return bytes(rng.integers(0, 256, t.byte_width).astype("uint8"))
        if pa.types.is_binary(t):
            return bytes(rng.integers(0, 256, int(rng.integers(0, 20))).astype("uint8"))
        if pa.types.is_date32(t):
            return int(rng.integers(0, 40000))
        if pa.types.is_timestamp(t):
            return int(rng.integers(0, 2 * 10**15))
        if pa.types.is_fixed_size_list(t):
            return [float(x) for x in rng.random(t.list_size)]
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return [one(t.value_type) for _ in range(int(rng.integers(0, 5)))]
        if pa.types.is_struct(t):
            return {f.name: one(f.type) for f in t}
        raise ValueError(t)
    return pa.array([one(t) for _ in range(n)], t)


def random_tables(count=14):
    """Random schemas (seeded): random types and nesting, nulls at every
    level, random row counts, batch sizes and page sizes."""
    for seed in range(count):
        rng = np.random.default_rng(1000 + seed)
        n = int(rng.integers(1, 5000))
        p_null = float(rng.choice([0.0, 0.05, 0.3]))
        cols = {"c%d" % i: random_values(rng, random_type(rng, 2), n, p_null)
                for i in range(int(rng.integers(1, 6)))}
        page = int(rng.choice([2000, 20000, 1 << 20]))
        yield "random_%d" % seed, pa.table(cols), page, int(rng.integers(1, 1500))


def write(d, version="2.0"):
    os.makedirs(d, exist_ok=True)
    every = [(name, t, page, 1000) for name, t, page in tables()]
    if version != "2.0":
        every += list(random_tables())
        # A column marked as blobs (large values stored out of line).
        rng = np.random.default_rng(7)
        vals = [None if i % 7 == 0 else bytes(rng.integers(0, 255, int(rng.integers(0, 5000))).astype("uint8"))
                for i in range(300)]
        blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
        t = pa.table({"id": pa.array(range(300)), "b": pa.array(vals, pa.large_binary())},
                     schema=pa.schema([pa.field("id", pa.int64()), blob]))
        every.append(("blob", t, None, 100))
        # A struct of fixed-width children marked packed: one column, the
        # children's bits side by side per row.
        st = pa.array([{"a": i, "b": i / 2, "c": i % 3} if i % 5 else None for i in range(3000)],
                      pa.struct([("a", pa.int32()), ("b", pa.float64()), ("c", pa.uint8())]))
        packed = pa.field("s", st.type, metadata={"packed": "true"})
        every.append(("packed_struct", pa.table({"id": pa.array(range(3000)), "s": st},
                                                schema=pa.schema([pa.field("id", pa.int64()), packed])), None, 700))
        if version == "2.2":
            # With a variable-width child, 2.2 packs each row's children
            # (the string FSST-compressed per value) into one full-zip
            # value: a variable packed struct. pylance refuses null
            # children there; null structs are allowed.
            n = 4000
            vst = pa.StructArray.from_arrays(
                [pa.array(range(n), pa.int32()),
                 pa.array([("name%d " % i) * (i % 6) for i in range(n)]),
                 pa.array([i * 0.25 for i in range(n)]),
                 pa.array([bytes([i % 256]) * (i % 40) for i in range(n)], pa.large_binary())],
                names=["a", "b", "c", "d"],
                mask=pa.array([i % 9 == 4 for i in range(n)]))
            vpacked = pa.field("s", vst.type, metadata={"packed": "true"})
            every.append(("var_packed_struct", pa.table({"id": pa.array(range(n)), "s": vst},
                                                        schema=pa.schema([pa.field("id", pa.int64()), vpacked])),
                          None, 900))
    for name, t, page, batch in every:
        kwargs = {"max_page_bytes": page} if page else {}
        path = os.path.join(d, name + ".lance")
        random = name.startswith("random_")
        # pylance's writer panics on some random schemas (nested structs
        # with nulls); its panic message is kept off the test's output.
        saved = os.dup(2) if random else None
        if random:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        try:
            with LanceFileWriter(path, t.schema, version=version, **kwargs) as w:
                for b in t.to_batches(max_chunksize=batch):
                    w.write_batch(b)
            failed = None
        except BaseException as e:
            if not random:
                raise
            failed = e
        finally:
            if saved is not None:
                os.dup2(saved, 2)
                os.close(saved)
        if failed is not None:
            print("pylance cannot write", name, t.schema.types, type(failed).__name__, file=sys.stderr)
            if os.path.exists(path):
                os.remove(path)
            continue
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

"""Interop oracle for datasets (table format), driven by the Rust tests.

  write DIR [V]    pylance creates DIR/py_ds (format V: 2.0 by default, "default"
                   for pylance's own default, 2.2; stable row ids, several
                   fragments, both kinds of deletion file, several versions) and
                   DIR/py_v{N}.arrow = to_table(with_row_id=True) of every version
  check DIR        pylance opens DIR/rs_ds written by Rust and compares every
                   version with DIR/rs_v{N}.arrow (rows, count_rows, time travel)
  mutate DIR       pylance appends to and deletes from DIR/rs_ds, then dumps the
                   new latest version to DIR/rs_after.arrow
  write_dict DIR   pylance creates DIR/py_dict (format 2.0, 2 fragments) with a
                   dictionary-encoded string column and a null-typed column, and
                   dumps what it reads to DIR/py_dict.arrow
  read_dict DIR    pylance reads DIR/rs_dict written by Rust, dumps it to
                   DIR/rs_dict_read.arrow and checks a filter on the dictionary
  dump_latest DIR [NAME]
                   pylance dumps the latest version of DIR/NAME (default py_ds;
                   with row ids) to DIR/py_latest.arrow and prints its indices
  write_flat DIR   pylance creates DIR/py_flat with its default data storage
                   version: numbers, strings, a 80-d vector and a struct, with
                   nulls at every level; DIR/py_flat.arrow holds its rows
"""
import json
import os
import sys

import pyarrow as pa
import lance


def dump(table, path):
    with pa.OSFile(path, "wb") as f:
        with pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)


def load(path):
    return pa.ipc.open_file(path).read_all()


def table(start, n):
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "name": pa.array([f"n{i}" if i % 11 else None for i in range(start, start + n)]),
        "score": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        "tags": pa.array([[f"t{i % 3}"] * (i % 3) for i in range(start, start + n)], pa.list_(pa.string())),
    })


def write(d, version="2.0"):
    uri = os.path.join(d, "py_ds")
    fmt = {} if version == "default" else {"data_storage_version": version}
    ds = lance.write_dataset(table(0, 12000), uri, **fmt,
                             enable_stable_row_ids=True, max_rows_per_file=10000)
    ds.delete("id < 10")                      # small deletion: .arrow
    ds.delete("id >= 2000 and id < 8000")     # > 5,000 rows of fragment 0: .bin
    ds.delete("id >= 10000 and id < 10500")   # part of fragment 1
    ds = lance.write_dataset(table(12000, 3000), uri, mode="append", max_rows_per_file=5000)
    ds.delete("id % 7 = 0")
    ds = lance.dataset(uri)
    ds.add_columns(pa.field("extra", pa.int32()))   # schema evolution: reads as NULL
    ds = lance.dataset(uri)
    for v in ds.versions():
        t = lance.dataset(uri, version=v["version"]).to_table(with_row_id=True)
        dump(t, os.path.join(d, f"py_v{v['version']}.arrow"))
    kinds = sorted({f.split(".")[-1] for f in os.listdir(os.path.join(uri, "_deletions"))})
    print(json.dumps({"versions": [v["version"] for v in ds.versions()], "deletion_kinds": kinds,
                      "data_storage_version": ds.data_storage_version}))


def flat_table(start, n):
    import numpy as np
    rng = np.random.default_rng(start)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 80).astype(np.float32)), 80)
    vec = pa.array(vec.to_pylist()[:], vec.type, mask=np.array([i % 9 == 4 for i in range(n)]))
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "name": pa.array([f"n{i}" if i % 7 else None for i in range(start, start + n)]),
        "score": pa.array([i * 0.25 for i in range(start, start + n)], pa.float64()),
        "emb": vec,
        "st": pa.array([None if i % 5 == 3 else {"x": i if i % 4 else None, "y": f"y{i % 3}"}
                        for i in range(start, start + n)],
                       pa.struct([("x", pa.int64()), ("y", pa.string())])),
    })


def write_flat(d):
    uri = os.path.join(d, "py_flat")
    ds = lance.write_dataset(flat_table(0, 5000), uri, max_rows_per_file=2000)
    dump(ds.to_table(), os.path.join(d, "py_flat.arrow"))
    print(json.dumps({"data_storage_version": ds.data_storage_version}))


def dump_latest(d, name="py_ds"):
    ds = lance.dataset(os.path.join(d, name))
    dump(ds.to_table(with_row_id=True), os.path.join(d, "py_latest.arrow"))
    print(json.dumps({"rows": ds.count_rows(), "indices": [i["name"] for i in ds.list_indices()]}))


def check(d):
    uri = os.path.join(d, "rs_ds")
    ds = lance.dataset(uri)
    bad = 0
    versions = [v["version"] for v in ds.versions()]
    expected_versions = sorted(int(f[4:-6]) for f in os.listdir(d) if f.startswith("rs_v") and f.endswith(".arrow"))
    if versions != expected_versions:
        print("BAD versions", versions, expected_versions)
        bad += 1
    for v in expected_versions:
        exp = load(os.path.join(d, f"rs_v{v}.arrow"))
        old = lance.dataset(uri, version=v)
        got = old.to_table()
        ok = got.equals(exp) and old.count_rows() == exp.num_rows
        print(("ok  " if ok else "BAD ") + f"version {v}: {got.num_rows} rows, count_rows {old.count_rows()}")
        if not ok:
            bad += 1
            print(got.slice(0, 5), exp.slice(0, 5))
    sys.exit(1 if bad else 0)


def mutate(d):
    uri = os.path.join(d, "rs_ds")
    ds = lance.dataset(uri)
    schema = ds.schema
    extra = pa.table({"id": pa.array([100000, 100001], pa.int64()), "value": pa.array(["x", None])}).cast(schema)
    ds = lance.write_dataset(extra, uri, mode="append")
    ds.delete("id = 1")
    dump(lance.dataset(uri).to_table(), os.path.join(d, "rs_after.arrow"))
    print("version", lance.dataset(uri).version)


def write_dict(d):
    words = ["red", "green", None, "blue", "red", "red"]
    t = pa.table({
        "id": pa.array(range(3000), pa.int64()),
        "color": pa.array([words[i % 6] for i in range(3000)]).dictionary_encode(),
        "nothing": pa.nulls(3000),
    })
    uri = os.path.join(d, "py_dict")
    lance.write_dataset(t, uri, data_storage_version="2.0", max_rows_per_file=2000)
    dump(lance.dataset(uri).to_table(), os.path.join(d, "py_dict.arrow"))


def read_dict(d):
    ds = lance.dataset(os.path.join(d, "rs_dict"))
    t = ds.to_table()
    dump(t, os.path.join(d, "rs_dict_read.arrow"))
    print("schema", t.schema)
    print("red", ds.count_rows(filter="color = 'red'"))


if __name__ == "__main__":
    {"write": write, "check": check, "mutate": mutate, "write_dict": write_dict,
     "read_dict": read_dict, "dump_latest": dump_latest, "write_flat": write_flat}[sys.argv[1]](*sys.argv[2:])

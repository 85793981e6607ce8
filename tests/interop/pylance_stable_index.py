"""pylance writes a dataset with stable row ids (format 2.0): several
fragments, deletions, a compaction, then more rows and deletions, and a
B-tree on `id`, a bitmap on `cat` and a zone map on `ts` built by pylance;
the Rust test checks that Fathom's use of these segments equals its full
scan, and prints pylance's own answers for a few filters as JSON.

  python3 pylance_stable_index.py DIR [VERSION]

VERSION is the data storage version (2.0 when omitted; "default" for
pylance's own default, 2.2 in pylance 14).
"""
import json
import os
import sys

import lance
import pyarrow as pa


def table(start, n):
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "cat": pa.array([f"c{i % 7}" if i % 11 else None for i in range(start, start + n)]),
        "ts": pa.array([i * 10 if i % 13 else None for i in range(start, start + n)], pa.int64()),
    })


def main():
    uri = os.path.join(sys.argv[1], "py_stable")
    version = sys.argv[2] if len(sys.argv) > 2 else "2.0"
    fmt = {} if version == "default" else {"data_storage_version": version}
    ds = lance.write_dataset(table(0, 6000), uri, **fmt,
                             enable_stable_row_ids=True, max_rows_per_file=1500)
    ds.delete("id < 500 OR (id >= 2000 AND id < 2600)")
    ds.optimize.compact_files(target_rows_per_fragment=4000)
    ds = lance.write_dataset(table(6000, 2000), uri, mode="append", max_rows_per_file=1000)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("ts", "ZONEMAP")
    ds = lance.dataset(uri)
    ds.delete("id % 5 = 0")
    ds.update({"cat": "'moved'"}, where="id >= 7000 AND id < 7010")
    ds = lance.dataset(uri)
    filters = ["id = 1429", "id >= 4000 AND id < 4100", "cat = 'c3'", "cat IS NULL",
               "ts > 70000", "ts IS NULL"]
    out = {f: ds.count_rows(filter=f) for f in filters}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

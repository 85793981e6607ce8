"""pylance compacts a dataset with indexes, remapping them (MODE "remap")
or deferring the remap to a fragment reuse index (MODE "defer"); prints,
as JSON, for each filter pylance's count with its indexes and without
(the truth), so the Rust test can check Fathom's counts on the result.

  python3 pylance_compacted.py DIR MODE
"""
import json
import os
import sys

import lance

from pylance_stable_index import table  # the same rows (id, cat, ts)


def main():
    mode = sys.argv[2]
    uri = os.path.join(sys.argv[1], f"py_compacted_{mode}")
    ds = lance.write_dataset(table(0, 20000), uri, data_storage_version="2.0",
                             max_rows_per_file=5000)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("ts", "ZONEMAP")
    ds.delete("id % 10 = 0")
    ds.optimize.compact_files(target_rows_per_fragment=10000,
                              defer_index_remap=(mode == "defer"))
    ds = lance.dataset(uri)
    filters = ["id = 1429", "id >= 4990 AND id < 5120", "id = 5000", "cat = 'c3'",
               "cat IS NULL", "ts > 150000", "ts IS NULL"]
    out = {f: [ds.count_rows(filter=f),
               ds.to_table(filter=f, columns=["id"], use_scalar_index=False).num_rows]
           for f in filters}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

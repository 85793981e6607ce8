"""Vector index interop with pylance 14.

  python3 pylance_vector.py write DIR ROWS DIM [VERSION]  # pylance writes t.lance (default version)
  python3 pylance_vector.py index DIR KIND METRIC PARTS [SUB_VECTORS]
  python3 pylance_vector.py search DIR METRIC K NPROBES REFINE [EF] < queries.json

`write` makes id, cat and emb (FixedSizeList<float32, DIM>, near one of
12 centres, seeded). `index` builds pylance's own vector index `emb_idx`
(replacing any). `search` prints, as JSON, for every query the ids and
`_distance` pylance returns through the index (REFINE 0: none), the
index types pylance lists, and whether its plan used the index.
"""
import json
import os
import sys

import lance
import numpy as np
import pyarrow as pa


def main():
    cmd, d = sys.argv[1], sys.argv[2]
    uri = os.path.join(d, "t.lance")
    if cmd == "write":
        rows, dim = int(sys.argv[3]), int(sys.argv[4])
        rng = np.random.default_rng(3)
        centres = rng.uniform(-5, 5, size=(12, dim)).astype(np.float32)
        emb = centres[rng.integers(0, 12, rows)] + rng.uniform(-1, 1, size=(rows, dim)).astype(np.float32)
        t = pa.table({
            "id": pa.array(np.arange(rows), pa.int64()),
            "cat": pa.array([f"c{i % 10}" for i in range(rows)]),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel(), pa.float32()), dim),
        })
        fmt = {"data_storage_version": sys.argv[5]} if len(sys.argv) > 5 else {}
        lance.write_dataset(t, uri, max_rows_per_file=max(1, rows // 2), **fmt)
    elif cmd == "index":
        kind, metric, parts = sys.argv[3], sys.argv[4], int(sys.argv[5])
        kw = {"num_sub_vectors": int(sys.argv[6])} if len(sys.argv) > 6 else {}
        ds = lance.dataset(uri)
        ds.create_index("emb", kind, name="emb_idx", metric=metric,
                        num_partitions=parts, replace=True, **kw)
    elif cmd == "search":
        metric, k, nprobes, refine = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        ef = int(sys.argv[7]) if len(sys.argv) > 7 else 1000
        ds = lance.dataset(uri)
        out = {"types": sorted(i["type"] for i in ds.list_indices()), "results": []}
        for q in json.load(sys.stdin):
            nearest = {"column": "emb", "q": np.array(q, np.float32), "k": k,
                       "nprobes": nprobes, "metric": metric, "use_index": True, "ef": ef}
            if refine:
                nearest["refine_factor"] = refine
            sc = ds.scanner(columns=["id"], nearest=nearest)
            t = sc.to_table()
            out["results"].append({"ids": t["id"].to_pylist(), "d": t["_distance"].to_pylist()})
            out["plan"] = sc.explain_plan()
        print(json.dumps(out))
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()

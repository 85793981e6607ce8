"""pylance side of the vector benchmark (sql_vector.rs).

  python3 pylance_vector_bench.py DATASET KIND PARTS SUB_VECTORS QUERIES.json CONFIG ...

Builds vector index KIND (metric l2, PARTS partitions, SUB_VECTORS for
IVF_PQ) on DATASET's `emb`, then runs every query of QUERIES.json under
each CONFIG `nprobes:refine:filter` (refine 0: none; filter empty: none,
else a prefilter) and `flat` (no index: brute force). Prints one JSON
object: build_ms, and per config the median latency (ms, each query timed
three times after a warm-up pass) and the ids returned for each query.
"""
import json
import statistics
import sys
import time

import lance
import numpy as np


def main():
    uri, kind, parts, m, qfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    queries = [np.array(q, np.float32) for q in json.load(open(qfile))]
    ds = lance.dataset(uri)
    kw = {"num_sub_vectors": m} if kind == "IVF_PQ" else {}
    t = time.perf_counter()
    ds.create_index("emb", kind, name="emb_idx", metric="l2", num_partitions=parts, replace=True, **kw)
    build_ms = (time.perf_counter() - t) * 1e3
    ds = lance.dataset(uri)
    out = {"build_ms": build_ms, "configs": {}}
    for cfg in sys.argv[6:]:
        if cfg == "flat":
            nprobes, refine, flt, use_index = 1, 0, "", False
        else:
            nprobes, refine, flt = cfg.split(":", 2)
            nprobes, refine, use_index = int(nprobes), int(refine), True
        times, ids = [], []
        for q in queries:  # warm-up pass, as the Rust side does
            nearest = {"column": "emb", "q": q, "k": 10, "nprobes": nprobes, "use_index": use_index}
            if refine:
                nearest["refine_factor"] = refine
            kw = {"filter": flt, "prefilter": True} if flt else {}
            ds.to_table(columns=["id"], nearest=nearest, **kw)
        for q in queries:
            nearest = {"column": "emb", "q": q, "k": 10, "nprobes": nprobes, "use_index": use_index}
            if refine:
                nearest["refine_factor"] = refine
            kw = {"filter": flt, "prefilter": True} if flt else {}
            best = None
            for _ in range(3):
                t = time.perf_counter()
                r = ds.to_table(columns=["id"], nearest=nearest, **kw)
                e = (time.perf_counter() - t) * 1e3
                best = e if best is None else min(best, e)
                times.append(e)
            ids.append(r["id"].to_pylist())
        out["configs"][cfg] = {"ms": statistics.median(times), "ids": ids}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

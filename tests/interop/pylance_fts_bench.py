"""pylance side of the full-text benchmark (sql_fts.rs).

  python3 pylance_fts_bench.py DATASET QUERIES.json

Builds an INVERTED index on DATASET's `body` (defaults, with positions),
then times each
query of QUERIES.json (`{"q": text, "op": "OR"|"AND"|"PHRASE", "filter": sql or
""}`; words written `+w` / `-w` make a BooleanQuery of MUST / MUST_NOT and
SHOULD clauses; top 10, a filter being a prefilter): a warm-up run, then the median
of seven. Prints one JSON object: version, build_ms, index_bytes and per
query its median latency (ms), the ids and the scores returned.
"""
import json
import logging
import os
import statistics
import sys
import time

import lance

from fts_query import full_text_query


def main():
    logging.disable(logging.WARNING)
    uri, qfile = sys.argv[1], sys.argv[2]
    queries = json.load(open(qfile))
    ds = lance.dataset(uri)
    t = time.perf_counter()
    ds.create_scalar_index("body", "INVERTED", name="body_idx", with_position=True, replace=True)
    build_ms = (time.perf_counter() - t) * 1e3
    ds = lance.dataset(uri)
    uuid = next(i["uuid"] for i in ds.list_indices() if i["name"] == "body_idx")
    d = os.path.join(uri, "_indices", uuid)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    out = {"version": lance.__version__, "build_ms": build_ms, "index_bytes": size, "queries": []}
    for q in queries:
        fq = full_text_query(q["q"], q["op"])
        kw = {"filter": q["filter"], "prefilter": True} if q["filter"] else {}

        def run():
            sc = ds.scanner(columns=["id", "_score"], limit=10,
                            full_text_query=fq, **kw)
            return sc.to_table()

        run()
        times = []
        for _ in range(7):
            s = time.perf_counter()
            r = run()
            times.append((time.perf_counter() - s) * 1e3)
        out["queries"].append({"ms": statistics.median(times), "ids": r["id"].to_pylist(),
                               "scores": r["_score"].to_pylist()})
    print(json.dumps(out))


if __name__ == "__main__":
    main()

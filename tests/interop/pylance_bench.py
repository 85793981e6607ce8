"""pylance side of the scalar index benchmark (sql_index.rs).

  python3 pylance_bench.py DATASET "cols|filter" ...

cols is `*`, a comma-separated list, `count` (count_rows) or `group:COL`
(a grouped count); an empty filter means every row.

Builds the same indexes as the Rust side on DATASET (a copy), then times
each query (median of 9) with to_table(columns, filter) or count_rows(filter). Prints
`version V`, `build MS BYTES` per index, `query MS` per query.
"""
import os
import statistics
import sys
import time

import lance


def size(ds, name):
    total = 0
    for idx in ds.list_indices():
        if idx["name"] == name:
            for u in idx.get("uuids", []) or [idx.get("uuid")]:
                d = os.path.join(ds.uri, "_indices", str(u))
                if os.path.isdir(d):
                    total += sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    return total


def main():
    uri = sys.argv[1]
    ds = lance.dataset(uri)
    print("version", lance.__version__)
    for col, kind in [("id", "BTREE"), ("cat", "BITMAP"), ("ts", "ZONEMAP")]:
        t = time.perf_counter()
        ds.create_scalar_index(col, kind, name=f"{col}_py")
        ms = (time.perf_counter() - t) * 1e3
        ds = lance.dataset(uri)
        print("build", f"{ms:.1f}", size(ds, f"{col}_py"))
    for q in sys.argv[2:]:
        cols, flt = q.split("|", 1)
        flt = flt or None
        if cols == "count":
            # Its fastest count: count_rows(filter).
            def run():
                return ds.count_rows(filter=flt)
        elif cols.startswith("group:"):
            # No grouped count in pylance: read the group column, group in pyarrow.
            g = cols[len("group:"):]

            def run():
                return ds.to_table(columns=[g], filter=flt).group_by(g).aggregate([([], "count_all")])
        else:
            columns = None if cols == "*" else cols.split(",")

            def run():
                return ds.to_table(columns=columns, filter=flt)
        run()
        times = []
        for _ in range(9):
            t = time.perf_counter()
            run()
            times.append((time.perf_counter() - t) * 1e3)
        print("query", f"{statistics.median(times):.3f}")


if __name__ == "__main__":
    main()

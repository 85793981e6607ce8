"""pylance side of the scalar index benchmark (sql_index.rs).

  python3 pylance_bench.py [--indexes=COL:KIND,...] DATASET "cols|filter" ...

cols is `*`, a comma-separated list, `count` (count_rows) or `group:COL`
(a grouped count); an empty filter means every row.

Builds the same indexes as the Rust side on DATASET (a copy; by default a
B-tree on id, a bitmap on cat and a zone map on ts), then times each query
(median of 9 runs, or of as many as fit in 3 s, at least 3) with
to_table(columns, filter) or count_rows(filter). Prints
`version V`, `build MS BYTES` per index, `open MS` (opening the dataset), `query MS`
per query.
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
    args = sys.argv[1:]
    indexes = [("id", "BTREE"), ("cat", "BITMAP"), ("ts", "ZONEMAP")]
    if args and args[0].startswith("--indexes="):
        spec = args.pop(0)[len("--indexes="):]
        indexes = [tuple(s.split(":")) for s in spec.split(",") if s]
    uri = args[0]
    ds = lance.dataset(uri)
    print("version", lance.__version__)
    for col, kind in indexes:
        t = time.perf_counter()
        ds.create_scalar_index(col, kind, name=f"{col}_py")
        ms = (time.perf_counter() - t) * 1e3
        ds = lance.dataset(uri)
        print("build", f"{ms:.1f}", size(ds, f"{col}_py"))
    opens = []
    for _ in range(3):
        t = time.perf_counter()
        ds = lance.dataset(uri)
        ds.count_rows()
        opens.append((time.perf_counter() - t) * 1e3)
    print("open", f"{statistics.median(opens):.3f}")
    for q in args[1:]:
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
        start = time.perf_counter()
        while len(times) < 9 and (len(times) < 3 or time.perf_counter() - start < 3.0):
            t = time.perf_counter()
            run()
            times.append((time.perf_counter() - t) * 1e3)
        print("query", f"{statistics.median(times):.3f}")


if __name__ == "__main__":
    main()

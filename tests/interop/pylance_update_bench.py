"""pylance side of the update benchmark (sql_updates.rs).

  python3 pylance_update_bench.py DATASET "cols|filter" ...

On DATASET (a copy): B-trees on id and k, then the queries timed fresh,
after `UPDATE SET k = (k + 1) % 1000 WHERE id % 100 = 7` (pylance's update
moves the rows), and after compaction (its indexes remapped). cols is `*`,
a comma-separated list or `count` (count_rows). Prints `version V`,
`phase NAME MS...` (one median per query), `update_s S`, `compact_s S`.
"""
import statistics
import sys
import time

import lance


def timed(run):
    run()
    times = []
    start = time.perf_counter()
    while len(times) < 9 and (len(times) < 3 or time.perf_counter() - start < 2.0):
        t = time.perf_counter()
        run()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def phase(name, uri, queries):
    ds = lance.dataset(uri)
    out = []
    for q in queries:
        cols, flt = q.split("|", 1)
        if cols == "count":
            out.append(timed(lambda: ds.count_rows(filter=flt)))
        else:
            columns = None if cols == "*" else cols.split(",")
            out.append(timed(lambda: ds.to_table(columns=columns, filter=flt)))
    print("phase", name, " ".join(f"{t:.3f}" for t in out))


def main():
    uri, queries = sys.argv[1], sys.argv[2:]
    print("version", lance.__version__)
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE", name="id_py")
    ds = lance.dataset(uri)
    ds.create_scalar_index("k", "BTREE", name="k_py")
    phase("fresh", uri, queries)
    ds = lance.dataset(uri)
    t = time.perf_counter()
    r = ds.update({"k": "(k + 1) % 1000"}, where="id % 100 = 7")
    print(f"update_s {time.perf_counter() - t:.4f} rows {r['num_rows_updated']}")
    phase("updated", uri, queries)
    ds = lance.dataset(uri)
    t = time.perf_counter()
    ds.optimize.compact_files()
    print(f"compact_s {time.perf_counter() - t:.4f}")
    phase("compacted", uri, queries)


if __name__ == "__main__":
    main()

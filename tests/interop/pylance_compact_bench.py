"""Times pylance's compaction of a dataset (its indexes remapped, Lance's
defaults) after deleting the rows FILTER matches; prints `compact_s S`.

  python3 pylance_compact_bench.py DATASET FILTER
"""
import sys
import time

import lance


def main():
    ds = lance.dataset(sys.argv[1])
    ds.delete(sys.argv[2])
    ds = lance.dataset(sys.argv[1])
    t = time.perf_counter()
    m = ds.optimize.compact_files()
    print(f"compact_s {time.perf_counter() - t:.4f}")
    print(f"metrics {m}")


if __name__ == "__main__":
    main()

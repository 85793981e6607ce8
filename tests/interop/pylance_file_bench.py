"""pylance's side of the file benchmark on a file of its default version.

  python3 pylance_file_bench.py write IPC LANCE   write IPC's table with
                                                  pylance's default version
  python3 pylance_file_bench.py time LANCE IDX COLS...
        time take of the row indices in IDX (one per line) and scans; each
        COLS entry is `label=col1,col2`; prints one `label ms` line per
        measurement (median over a time budget)

pylance opens a reader per measurement with the columns it needs, as a
caller would; opening is part of what is timed (it is for us too).
"""
import statistics
import struct
import sys
import time

import pyarrow as pa
from lance.file import LanceFileReader, LanceFileWriter


def write(ipc, out):
    t = pa.ipc.open_file(ipc).read_all()
    with LanceFileWriter(out, t.schema) as w:
        for b in t.to_batches(max_chunksize=10000):
            w.write_batch(b)
    with open(out, "rb") as f:
        f.seek(-8, 2)
        major, minor = struct.unpack("<HH", f.read(4))
    print("version", f"{major}.{minor}")


def median_ms(f, budget=3.0, min_runs=3, max_runs=15):
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget and len(times) < max_runs):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def timing(path, idx_file, *specs):
    idx = [int(x) for x in open(idx_file).read().split()]
    for spec in specs:
        label, cols = spec.split("=")
        cols = cols.split(",")
        if label.startswith("take"):
            def f():
                r = LanceFileReader(path, columns=cols)
                n = r.take_rows(idx).to_table().num_rows
                assert n == len(idx)
        else:
            def f():
                r = LanceFileReader(path, columns=cols)
                r.read_all(batch_size=8192).to_table()
        f()  # warm
        print(label, round(median_ms(f), 3), flush=True)


if __name__ == "__main__":
    {"write": write, "time": timing}[sys.argv[1]](*sys.argv[2:])

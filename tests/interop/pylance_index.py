"""pylance uses indexes written by Fathom: for each "name|filter" argument,
the dataset's index `name` must appear in pylance's plan for `filter` and
the rows it returns must equal a full scan's (pyarrow filter of to_table).

  python3 pylance_index.py DATASET "name|filter" ...
"""
import sys

import lance
import pyarrow.compute as pc  # noqa: F401


def main():
    ds = lance.dataset(sys.argv[1])
    names = {i["name"]: i["type"] for i in ds.list_indices()}
    print("indices", names)
    bad = 0
    for arg in sys.argv[2:]:
        name, flt = arg.split("|", 1)
        plan = ds.scanner(filter=flt).explain_plan(True)
        used = f"@{name}(" in plan
        got = sorted(ds.to_table(filter=flt, columns=["id"])["id"].to_pylist())
        # Oracle: the same filter with every index ignored.
        want = sorted(ds.to_table(filter=flt, columns=["id"], use_scalar_index=False)["id"].to_pylist())
        ok = used and got == want
        print(("ok  " if ok else "BAD ") + f"{flt}: {len(got)} rows, index used: {used}")
        bad += 0 if ok else 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

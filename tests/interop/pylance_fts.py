"""Full-text (INVERTED) index interop with pylance 14.

  python3 pylance_fts.py write DIR ROWS           # pylance writes t.lance (id, body, title), 2 fragments
  python3 pylance_fts.py index DIR [with_position] # pylance builds INVERTED index body_idx (replacing any)
  python3 pylance_fts.py index_title DIR           # pylance builds INVERTED index title_idx
  python3 pylance_fts.py search DIR K < queries.json

`write` makes `body` from a Zipf vocabulary of made-up words (seeded), a
few rows NULL or stop words only. `search` prints, as JSON, for every
query (`{"q": text, "op": "OR"|"AND"|"PHRASE"}`; `+w` / `-w` words make a
BooleanQuery, a phrase is `"a b"` or `"a b"~slop`) the ids and `_score` pylance
returns (best first), the index types it lists and whether its plan used
the index. A query with `"columns": [[name, boost], ...]` is a
MultiMatchQuery over those columns with those boosts; with
`"fuzziness": N`, a MatchQuery on body with that fuzziness.
"""
import json
import logging
import os
import sys

import lance
import numpy as np
import pyarrow as pa


def vocabulary():
    return [a + b + c for a in "bdfgkmpvz" for b in "aou" for c in "bdgkmpz"]


def main():
    logging.disable(logging.WARNING)
    cmd, d = sys.argv[1], sys.argv[2]
    uri = os.path.join(d, "t.lance")
    if cmd == "write":
        rows = int(sys.argv[3])
        rng = np.random.default_rng(5)
        vocab = vocabulary()
        bodies = []
        for _ in range(rows):
            u = rng.random()
            if u < 0.03:
                bodies.append(None)
            elif u < 0.05:
                bodies.append("the of and")
            else:
                n = int(rng.integers(1, 15))
                ranks = (len(vocab) ** rng.random(n)).astype(int) - 1
                words = [vocab[min(r, len(vocab) - 1)] for r in ranks]
                bodies.append(" ".join(w.upper() if rng.random() < 0.2 else w for w in words))
        # Titles from a generator of their own: bodies stay as they were.
        trng = np.random.default_rng(6)
        titles = []
        for _ in range(rows):
            n = int(trng.integers(1, 6))
            ranks = (len(vocab) ** trng.random(n)).astype(int) - 1
            titles.append(" ".join(vocab[min(r, len(vocab) - 1)] for r in ranks))
        t = pa.table({"id": pa.array(np.arange(rows), pa.int64()), "body": pa.array(bodies, pa.string()),
                      "title": pa.array(titles, pa.string())})
        lance.write_dataset(t, uri, max_rows_per_file=max(1, (rows + 1) // 2))
    elif cmd == "index":
        pos = len(sys.argv) > 3 and sys.argv[3] == "with_position"
        ds = lance.dataset(uri)
        ds.create_scalar_index("body", "INVERTED", name="body_idx", with_position=pos, replace=True)
    elif cmd == "index_title":
        lance.dataset(uri).create_scalar_index("title", "INVERTED", name="title_idx", replace=True)
    elif cmd == "search":
        k = int(sys.argv[3])
        ds = lance.dataset(uri)
        from fts_query import full_text_query
        out = {"types": sorted(i["type"] for i in ds.list_indices()), "results": []}
        for q in json.load(sys.stdin):
            if "fuzziness" in q:
                from lance.query import MatchQuery
                fq = MatchQuery(q["q"], "body", fuzziness=q["fuzziness"])
            elif "columns" in q:
                from lance.query import FullTextOperator, MultiMatchQuery
                op = FullTextOperator.AND if q["op"] == "AND" else FullTextOperator.OR
                fq = MultiMatchQuery(q["q"], [c for c, _ in q["columns"]],
                                     boosts=[b for _, b in q["columns"]], operator=op)
            else:
                fq = full_text_query(q["q"], q["op"])
            sc = ds.scanner(columns=["id", "_score"], full_text_query=fq, limit=k)
            t = sc.to_table()
            out["results"].append({"ids": t["id"].to_pylist(), "scores": t["_score"].to_pylist()})
            out["plan"] = sc.explain_plan()
        print(json.dumps(out))
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()

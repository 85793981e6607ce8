"""The pylance full-text query for a query string, shared by the FTS
interop test and benchmark scripts.

`op` "PHRASE": `"a b"` or `"a b"~slop` is a PhraseQuery. Otherwise words
written `+w` / `-w` make a BooleanQuery of MUST / MUST_NOT and SHOULD
MatchQuery clauses, and any other text is a MatchQuery under `op`
("AND" or "OR").
"""
import re

from lance.query import BooleanQuery, FullTextOperator, MatchQuery, Occur, PhraseQuery


def full_text_query(text, op, column="body"):
    if op == "PHRASE":
        m = re.fullmatch(r'"(.*)"(?:~(\d+))?', text)
        return PhraseQuery(m.group(1), column, slop=int(m.group(2) or 0))
    words = text.split()
    if any(w[0] in "+-" for w in words):
        occur = {"+": Occur.MUST, "-": Occur.MUST_NOT}
        return BooleanQuery([(occur.get(w[0], Occur.SHOULD), MatchQuery(w.lstrip("+-"), column))
                             for w in words])
    operator = FullTextOperator.AND if op == "AND" else FullTextOperator.OR
    return MatchQuery(text, column, operator=operator)

"""The pylance full-text query for a query string, shared by the FTS
interop test and benchmark scripts.

`op` "PHRASE": `"a b"` or `"a b"~slop` is a PhraseQuery. Otherwise words
written `+w` / `-w` make a BooleanQuery of MUST / MUST_NOT and SHOULD
MatchQuery clauses, and any other text is a MatchQuery under `op`
("AND" or "OR"). Text with phrases or parenthesized groups is a nested
BooleanQuery: words are MatchQuery clauses, `"a b"~N` PhraseQuery
clauses, `( ... )` BooleanQuery clauses, each MUST with `+`, MUST_NOT
with `-`, else MUST under "AND" and SHOULD under "OR".
"""
import re

from lance.query import BooleanQuery, FullTextOperator, MatchQuery, Occur, PhraseQuery


def full_text_query(text, op, column="body"):
    if op == "PHRASE":
        m = re.fullmatch(r'"(.*)"(?:~(\d+))?', text)
        return PhraseQuery(m.group(1), column, slop=int(m.group(2) or 0))
    if any(c in text for c in '()"'):
        return _nested(text, op, column)
    words = text.split()
    if any(w[0] in "+-" for w in words):
        occur = {"+": Occur.MUST, "-": Occur.MUST_NOT}
        return BooleanQuery([(occur.get(w[0], Occur.SHOULD), MatchQuery(w.lstrip("+-"), column))
                             for w in words])
    operator = FullTextOperator.AND if op == "AND" else FullTextOperator.OR
    return MatchQuery(text, column, operator=operator)


def _nested(text, op, column):
    plain = Occur.MUST if op == "AND" else Occur.SHOULD
    at = 0

    def clauses():
        nonlocal at
        out = []
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at == len(text):
                return out
            if text[at] == ")":
                at += 1
                return out
            occur = plain
            if text[at] in "+-":
                occur = Occur.MUST if text[at] == "+" else Occur.MUST_NOT
                at += 1
            if text[at] == "(":
                at += 1
                out.append((occur, BooleanQuery(clauses())))
            elif text[at] == '"':
                end = text.index('"', at + 1)
                phrase = text[at + 1:end]
                at = end + 1
                m = re.match(r"~(\d+)", text[at:])
                slop = 0
                if m:
                    slop = int(m.group(1))
                    at += m.end()
                out.append((occur, PhraseQuery(phrase, column, slop=slop)))
            else:
                m = re.match(r'[^\s()"]+', text[at:])
                at += m.end()
                out.append((occur, MatchQuery(m.group(0), column)))

    return BooleanQuery(clauses())

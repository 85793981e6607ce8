//! Nested boolean full-text queries (phrases and parenthesized groups as
//! clauses, `+` / `-` at every level, fuzzy terms that must or must not
//! be there) against a brute-force evaluation of the same clause tree,
//! built here: ranked search and the match predicate, on unindexed
//! fragments, an index, and both after appends and deletes.

use std::collections::HashSet;

use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::run_sql;
use fathom_table::WriteParams;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::common::ids;
use super::fts::{
    Model, Row, body, holds_phrase, index_body, same, scored, setup, tokens, tokens_at, vocabulary,
};

/// A clause: how it takes part (0 optional, 1 `+`, 2 `-`) and what it is.
#[derive(Debug, Clone)]
enum Node {
    Word(String),
    Phrase(Vec<String>, u32),
    Group(Vec<(u8, Node)>),
    /// A fuzzy term's expansions: any of them (never rendered).
    AnyOf(Vec<String>),
}

fn render(clauses: &[(u8, Node)]) -> String {
    clauses
        .iter()
        .map(|(o, n)| {
            let sign = ["", "+", "-"][*o as usize];
            match n {
                Node::Word(w) => format!("{sign}{w}"),
                Node::Phrase(ws, 0) => format!("{sign}\"{}\"", ws.join(" ")),
                Node::Phrase(ws, s) => format!("{sign}\"{}\"~{s}", ws.join(" ")),
                Node::Group(g) => format!("{sign}({})", render(g)),
                Node::AnyOf(_) => unreachable!("expansions are not rendered"),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Random clauses: frequent words (each at most once per level), phrases
/// of two words (often two adjacent words of a live row), groups.
fn clauses(rng: &mut StdRng, words: &[String], rows: &[&Row], depth: u32) -> Vec<(u8, Node)> {
    let n = rng.random_range(1..4);
    let mut used = HashSet::new();
    let mut out = vec![];
    for _ in 0..n {
        let o = [0, 0, 1, 2][rng.random_range(0..4)];
        let node = match rng.random_range(0..6) {
            0 | 1 if depth < 2 => Node::Group(clauses(rng, words, rows, depth + 1)),
            2 => {
                let r = rows[rng.random_range(0..rows.len())];
                let t: Vec<String> = tokens(r.body.as_deref().unwrap_or(""));
                let ws = if t.len() >= 2 && rng.random_bool(0.7) {
                    let at = rng.random_range(0..t.len() - 1);
                    t[at..at + 2].to_vec()
                } else {
                    (0..2)
                        .map(|_| words[rng.random_range(0..words.len())].clone())
                        .collect()
                };
                Node::Phrase(ws, [0, 0, 1][rng.random_range(0..3)])
            }
            _ => {
                let w = words[rng.random_range(0..words.len())].clone();
                if !used.insert(w.clone()) {
                    continue;
                }
                Node::Word(w)
            }
        };
        out.push((o, node));
    }
    if out.is_empty() {
        out.push((0, Node::Word(words[0].clone())));
    }
    out
}

/// The brute-force BM25 of the table version's counted rows.
struct Bm25 {
    docs: Vec<Vec<String>>,
    avgdl: f64,
}

impl Bm25 {
    fn new(m: &Model) -> Bm25 {
        let docs: Vec<Vec<String>> = m
            .counted()
            .iter()
            .map(|r| r.body.as_deref().map(tokens).unwrap_or_default())
            .filter(|t| !t.is_empty())
            .collect();
        let avgdl = docs.iter().map(|d| d.len()).sum::<usize>() as f64 / docs.len().max(1) as f64;
        Bm25 { docs, avgdl }
    }

    fn term(&self, t: &str, doc: &[(String, u32)]) -> Option<f64> {
        let f = doc.iter().filter(|(w, _)| w == t).count() as f64;
        if f == 0.0 {
            return None;
        }
        let n = self.docs.len() as f64;
        let df = self
            .docs
            .iter()
            .filter(|d| d.iter().any(|w| w == t))
            .count() as f64;
        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
        let len = doc.len() as f64;
        Some(idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * len / self.avgdl)))
    }

    /// A row's score under `clauses`, `None` when it does not match
    /// (plain clauses required when `and`).
    fn eval(&self, clauses: &[(u8, Node)], and: bool, doc: &[(String, u32)]) -> Option<f64> {
        let mut wanted = false;
        let mut s = 0.0;
        for (o, n) in clauses {
            let r = match n {
                Node::Word(w) => self.term(&w.to_lowercase(), doc),
                Node::Phrase(ws, slop) => {
                    let q = tokens_at(&ws.join(" "));
                    if holds_phrase(doc, &q, *slop) {
                        let distinct: HashSet<&String> = q.iter().map(|(w, _)| w).collect();
                        Some(distinct.into_iter().filter_map(|w| self.term(w, doc)).sum())
                    } else {
                        None
                    }
                }
                Node::Group(g) => self.eval(g, and, doc),
                Node::AnyOf(ws) => {
                    let held: Vec<f64> = ws.iter().filter_map(|w| self.term(w, doc)).collect();
                    (!held.is_empty()).then(|| held.iter().sum())
                }
            };
            let o = if *o == 0 && and { 1 } else { *o };
            match (o, r) {
                (1, None) | (2, Some(_)) => return None,
                (_, None) => {}
                (_, Some(x)) => {
                    wanted = true;
                    s += x;
                }
            }
        }
        wanted.then_some(s)
    }

    /// (id, score) of the live rows matching, best first, ties by id.
    fn search(&self, m: &Model, clauses: &[(u8, Node)], and: bool) -> Vec<(i64, f64)> {
        let mut out: Vec<(i64, f64)> = m
            .rows
            .iter()
            .filter(|r| r.live)
            .filter_map(|r| {
                let doc = tokens_at(r.body.as_deref().unwrap_or(""));
                self.eval(clauses, and, &doc).map(|s| (r.id, s))
            })
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

async fn check(ctx: &SessionContext, m: &Model, rng: &mut StdRng, stage: &str) {
    let vocab = vocabulary();
    // The most frequent words (the bodies are Zipf-like), so clauses match.
    let words = &vocab[..12];
    let live: Vec<&Row> = m
        .rows
        .iter()
        .filter(|r| r.live && r.body.is_some())
        .collect();
    let bm25 = Bm25::new(m);
    for _ in 0..25 {
        let c = clauses(rng, words, &live, 0);
        let q = render(&c);
        let and = rng.random_bool(0.3);
        let op = if and { ", 'AND'" } else { "" };
        let want = bm25.search(m, &c, and);
        let what = format!("{stage}: '{q}'{op}");
        let all = scored(
            ctx,
            &format!("SELECT id, _score FROM fts('t', 'body', '{q}'{op}) ORDER BY _score DESC, id"),
        )
        .await;
        same(&all, &want, None, &what);
        let top = scored(
            ctx,
            &format!(
                "SELECT id, _score FROM fts('t', 'body', '{q}'{op}) ORDER BY _score DESC LIMIT 10"
            ),
        )
        .await;
        same(&top, &want, Some(10), &format!("{what} top 10"));
        let mut want_ids: Vec<i64> = want.iter().map(|(id, _)| *id).collect();
        want_ids.sort();
        let got = ids(
            ctx,
            &format!("SELECT id FROM t WHERE text_match(body, '{q}'{op}) ORDER BY id"),
        )
        .await;
        assert_eq!(got, want_ids, "{what} text_match");
        let got = ids(
            ctx,
            &format!("SELECT id FROM t WHERE text_match(body, '{q}'{op}) OR id < 0 ORDER BY id"),
        )
        .await;
        assert_eq!(got, want_ids, "{what} text_match row by row");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_queries_equal_brute_force() {
    let (_dir, ctx, mut m) = setup(600, 150, 31).await;
    let mut rng = StdRng::seed_from_u64(7);
    check(&ctx, &m, &mut rng, "unindexed").await;
    index_body(&ctx, &mut m).await;
    check(&ctx, &m, &mut rng, "indexed").await;
    // An unindexed fragment beside the index, and deletes in both.
    let vocab = vocabulary();
    let ids: Vec<i64> = (10_000..10_200).collect();
    let bodies: Vec<Option<String>> = ids.iter().map(|_| body(&mut rng, &vocab)).collect();
    m.append(&ctx, ids, bodies, WriteParams::default().max_rows_per_file)
        .await;
    run_sql(&ctx, "DELETE FROM t WHERE id % 9 = 4")
        .await
        .unwrap();
    for r in m.rows.iter_mut().filter(|r| r.id % 9 == 4) {
        r.live = false;
    }
    m.refresh(&ctx).await;
    check(&ctx, &m, &mut rng, "appended and deleted").await;
    // Fuzzy terms that must or must not be there: any of their
    // expansions, as brute force sees it.
    for (q, and) in [
        ("+bab~ bod", false),
        ("bod -bab~1", false),
        ("+bod~ +bab", false),
        ("bok~ bab", true),
        ("(bab~ -bod) +\"bab bod\"~1", false),
    ] {
        let c: Vec<(u8, Node)> = q
            .split_whitespace()
            .map(|w| {
                let (o, w) = match w.as_bytes()[0] {
                    b'+' => (1, &w[1..]),
                    b'-' => (2, &w[1..]),
                    _ => (0, w),
                };
                if w.starts_with('(') || w.ends_with(')') || w.contains('"') {
                    return (o, Node::Word(String::new()));
                }
                let n = match w.contains('~') {
                    true => Node::AnyOf(
                        m.expand_fuzzy(w)
                            .split_whitespace()
                            .map(str::to_string)
                            .collect(),
                    ),
                    false => Node::Word(w.to_string()),
                };
                (o, n)
            })
            .collect();
        let c = if q.starts_with('(') {
            // The one query with a group and a phrase, spelled out.
            let bab = m
                .expand_fuzzy("bab~")
                .split_whitespace()
                .map(str::to_string)
                .collect();
            vec![
                (
                    0,
                    Node::Group(vec![(0, Node::AnyOf(bab)), (2, Node::Word("bod".into()))]),
                ),
                (1, Node::Phrase(vec!["bab".into(), "bod".into()], 1)),
            ]
        } else {
            c
        };
        let want = Bm25::new(&m).search(&m, &c, and);
        assert!(!want.is_empty(), "{q}");
        let op = if and { ", 'AND'" } else { "" };
        let got = scored(
            &ctx,
            &format!("SELECT id, _score FROM fts('t', 'body', '{q}'{op}) ORDER BY _score DESC, id"),
        )
        .await;
        same(&got, &want, None, &format!("fuzzy '{q}'{op}"));
    }
    // Two quoted phrases are two optional phrase clauses, not one phrase
    // `bab bod" "bod bab` (the string starts and ends with a quote).
    let two = [
        (0, Node::Phrase(vec!["bab".into(), "bod".into()], 0)),
        (0, Node::Phrase(vec!["bod".into(), "bab".into()], 0)),
    ];
    let want = Bm25::new(&m).search(&m, &two, false);
    assert!(!want.is_empty());
    let got = scored(
        &ctx,
        "SELECT id, _score FROM fts('t', 'body', '\"bab bod\" \"bod bab\"') ORDER BY _score DESC, id",
    )
    .await;
    same(&got, &want, None, "two phrases");
    let plan = super::common::text(
        &ctx,
        "EXPLAIN SELECT id FROM t WHERE text_match(body, '+(bab dok) -\"bad bag\"')",
    )
    .await;
    assert!(plan.contains("index=body_idx"), "{plan}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_query_syntax_errors_are_clear() {
    let (_dir, ctx, _m) = setup(50, 50, 3).await;
    for (q, says) in [
        ("(bab dok", "'(' without a closing ')'"),
        ("bab) dok", "')' without an opening '('"),
        (
            "+ (bab)",
            "'+' must be followed by a word, a phrase or a group",
        ),
        ("(bab -bab)", "both required or wanted and excluded"),
        ("\"bab dok\"~x", "takes a slop"),
    ] {
        let e = ctx
            .sql(&format!("SELECT id FROM fts('t', 'body', '{q}')"))
            .await
            .err()
            .unwrap_or_else(|| panic!("'{q}' should be refused"));
        assert!(e.to_string().contains(says), "'{q}': {e}");
    }
}

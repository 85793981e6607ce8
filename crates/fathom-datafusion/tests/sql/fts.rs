//! Full-text search from SQL against a brute-force BM25 computed here,
//! from the rows themselves, with a tokenizer of its own: every matching
//! row with its score (to 1e-4), ranked top-k equal to the brute-force
//! top-k, after appends (unindexed fragments), deletes, updates that move
//! rows, index extends and rebuilds, compactions; WHERE filters are
//! prefilters.
//!
//! The corpus statistics the oracle uses are the table version's: live
//! rows, plus rows deleted since an index segment took them whose
//! fragment is still in the table (Lance counts those, as an index is
//! not rewritten by a delete).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type, UInt64Type};
use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::run_sql;
use fathom_datafusion::{TableOptions, new_session, register_dataset};
use fathom_table::{Dataset, WriteMode, WriteParams};
use rand::{Rng, SeedableRng};

use super::common::{ids, text};

/// Words the English analyzer keeps as they are (lower-cased): no stop
/// word, nothing a stemmer strips.
pub(super) fn vocabulary() -> Vec<String> {
    let mut v = vec![];
    for a in "bdfgkmpvz".chars() {
        for b in "aou".chars() {
            for c in "bdgkmpz".chars() {
                v.push(format!("{a}{b}{c}"));
            }
        }
    }
    v
}

/// A body of 0..12 words, Zipf-like, some capitalised, with punctuation;
/// 5% NULL, 3% only stop words.
pub(super) fn body(rng: &mut rand::rngs::StdRng, vocab: &[String]) -> Option<String> {
    if rng.random_bool(0.05) {
        return None;
    }
    if rng.random_bool(0.03) {
        return Some("The of, AND the".into());
    }
    let n = rng.random_range(0..12);
    let words: Vec<String> = (0..n)
        .map(|_| {
            // Zipf-like: rank r with weight ~ 1/r.
            let r = (vocab.len() as f64).powf(rng.random_range(0.0..1.0)) as usize - 1;
            let w = &vocab[r.min(vocab.len() - 1)];
            if rng.random_bool(0.2) {
                w.to_uppercase()
            } else {
                w.clone()
            }
        })
        .collect();
    Some(words.join(if rng.random_bool(0.5) { " " } else { ", " }))
}

pub(super) fn batch(ids: &[i64], bodies: &[Option<String>]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("cat", DataType::Utf8, false),
            Field::new("body", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("c{}", i.rem_euclid(5))),
            )),
            Arc::new(StringArray::from(bodies.to_vec())),
        ],
    )
    .unwrap()
}

/// The oracle's tokenizer: words of letters, lower-cased, with their
/// positions, stop words out (their positions still count).
pub(super) fn tokens_at(s: &str) -> Vec<(String, u32)> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .enumerate()
        .filter(|(_, w)| !["the", "of", "and"].contains(&w.as_str()))
        .map(|(i, w)| (w, i as u32))
        .collect()
}

pub(super) fn tokens(s: &str) -> Vec<String> {
    tokens_at(s).into_iter().map(|(w, _)| w).collect()
}

/// Whether `doc` holds `phrase` (tokens with positions): each token
/// after the first at its offset from the previous one or up to `slop`
/// positions further, in order.
pub(super) fn holds_phrase(doc: &[(String, u32)], phrase: &[(String, u32)], slop: u32) -> bool {
    fn from(
        doc: &[(String, u32)],
        phrase: &[(String, u32)],
        j: usize,
        prev: u32,
        slop: u32,
    ) -> bool {
        if j == phrase.len() {
            return true;
        }
        let lo = prev + (phrase[j].1 - phrase[j - 1].1);
        doc.iter()
            .filter(|(w, q)| *w == phrase[j].0 && *q >= lo && *q <= lo + slop)
            .any(|(_, q)| from(doc, phrase, j + 1, *q, slop))
    }
    let Some((w0, _)) = phrase.first() else {
        return true;
    };
    doc.iter()
        .filter(|(w, _)| w == w0)
        .any(|(_, s)| from(doc, phrase, 1, *s, slop))
}

#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) id: i64,
    pub(super) body: Option<String>,
    pub(super) live: bool,
    /// Taken by an index segment (while live).
    pub(super) indexed: bool,
    pub(super) fragment: u64,
}

pub(super) struct Model {
    pub(super) rows: Vec<Row>,
}

impl Model {
    /// Rows the statistics count: live ones, and deleted ones an index
    /// took whose fragment is still there.
    pub(super) fn counted(&self) -> Vec<&Row> {
        let frags: HashSet<u64> = self
            .rows
            .iter()
            .filter(|r| r.live)
            .map(|r| r.fragment)
            .collect();
        self.rows
            .iter()
            .filter(|r| r.live || (r.indexed && frags.contains(&r.fragment)))
            .collect()
    }

    /// (id, score) of every live row matching `query` (all terms when
    /// `and`) that `keep` accepts, best first, ties by id.
    fn search(&self, query: &str, and: bool, keep: &dyn Fn(&Row) -> bool) -> Vec<(i64, f64)> {
        self.search_as(query, and, None, keep)
    }

    /// As `search`; `phrase` (a slop): the query's tokens in order,
    /// adjacent or up to the slop further apart.
    fn search_as(
        &self,
        query: &str,
        and: bool,
        phrase: Option<u32>,
        keep: &dyn Fn(&Row) -> bool,
    ) -> Vec<(i64, f64)> {
        let slop = phrase.unwrap_or(0);
        let phrase = phrase.is_some();
        let and = and || phrase;
        let qpos = tokens_at(query);
        // Terms and how each takes part: 0 should, 1 must, 2 must not
        // (`+word`, `-word` outside phrases).
        let mut terms: Vec<String> = vec![];
        let mut occur: Vec<u8> = vec![];
        let clauses: Vec<&str> = if phrase {
            vec![query]
        } else {
            query.split_whitespace().collect()
        };
        for c in clauses {
            let (o, w) = match c.chars().next() {
                Some('+') if !phrase => (1, &c[1..]),
                Some('-') if !phrase => (2, &c[1..]),
                _ => (u8::from(and), c),
            };
            for t in tokens(w) {
                match terms.iter().position(|x| *x == t) {
                    Some(i) => occur[i] = occur[i].max(o),
                    None => {
                        terms.push(t);
                        occur.push(o);
                    }
                }
            }
        }
        let counted = self.counted();
        let docs: Vec<Vec<String>> = counted
            .iter()
            .map(|r| r.body.as_deref().map(tokens).unwrap_or_default())
            .filter(|t| !t.is_empty())
            .collect();
        let n = docs.len() as f64;
        let avgdl = docs.iter().map(|d| d.len()).sum::<usize>() as f64 / n.max(1.0);
        let idf: Vec<f64> = terms
            .iter()
            .map(|t| {
                let df = docs.iter().filter(|d| d.contains(t)).count() as f64;
                ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
            })
            .collect();
        let mut out = vec![];
        for r in self.rows.iter().filter(|r| r.live && keep(r)) {
            let toks = r.body.as_deref().map(tokens).unwrap_or_default();
            let len = toks.len() as f64;
            let tf: Vec<usize> = terms
                .iter()
                .map(|t| toks.iter().filter(|x| *x == t).count())
                .collect();
            let occur = &occur;
            let has = |o: u8| (0..terms.len()).filter(move |i| occur[*i] == o);
            if has(1).any(|i| tf[i] == 0) || has(2).any(|i| tf[i] > 0) {
                continue;
            }
            if has(1).next().is_none() && has(0).all(|i| tf[i] == 0) {
                continue;
            }
            if phrase && !holds_phrase(&tokens_at(r.body.as_deref().unwrap_or("")), &qpos, slop) {
                continue;
            }
            let s: f64 = tf
                .iter()
                .zip(&idf)
                .zip(occur)
                .filter(|((f, _), o)| **f > 0 && **o != 2)
                .map(|(x, _)| x)
                .map(|(f, idf)| {
                    let f = *f as f64;
                    idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * len / avgdl))
                })
                .sum();
            out.push((r.id, s));
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    /// Appends rows `ids` with `bodies` to the table `t` of `ctx` as
    /// new (unindexed) fragments of at most `frag_rows` rows, and to the
    /// model.
    pub(super) async fn append(
        &mut self,
        ctx: &SessionContext,
        ids: Vec<i64>,
        bodies: Vec<Option<String>>,
        frag_rows: usize,
    ) {
        super::common::append_to_t(ctx, batch(&ids, &bodies), frag_rows).await;
        for (id, body) in ids.into_iter().zip(bodies) {
            self.rows.push(Row {
                id,
                body,
                live: true,
                indexed: false,
                fragment: 0,
            });
        }
    }

    /// Records the fragment of every live row.
    pub(super) async fn refresh(&mut self, ctx: &SessionContext) {
        let b = ctx
            .sql("SELECT id, _rowaddr FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let mut at = HashMap::new();
        for b in &b {
            let ids = b.column(0).as_primitive::<Int64Type>();
            let a = b.column(1).as_primitive::<UInt64Type>();
            for i in 0..b.num_rows() {
                at.insert(ids.value(i), a.value(i) >> 32);
            }
        }
        for r in self.rows.iter_mut().filter(|r| r.live) {
            r.fragment = at[&r.id];
        }
        assert_eq!(at.len(), self.rows.iter().filter(|r| r.live).count());
    }
}

/// (id, _score) of `sql`'s rows.
pub(super) async fn scored(ctx: &SessionContext, sql: &str) -> Vec<(i64, f32)> {
    let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    b.iter()
        .flat_map(|b| {
            let ids = b.column(0).as_primitive::<Int64Type>();
            let s = b.column(1).as_primitive::<Float32Type>();
            (0..b.num_rows())
                .map(|i| (ids.value(i), s.value(i)))
                .collect::<Vec<_>>()
        })
        .collect()
}

pub(super) fn close(a: f32, b: f64) -> bool {
    (a as f64 - b).abs() <= 1e-4 * b.abs().max(1.0)
}

/// `got` (best first, ties in any order) is `want` (or its top k).
pub(super) fn same(got: &[(i64, f32)], want: &[(i64, f64)], k: Option<usize>, what: &str) {
    let want_k = &want[..k.unwrap_or(want.len()).min(want.len())];
    assert_eq!(got.len(), want_k.len(), "{what}: {got:?} vs {want_k:?}");
    let exact: HashMap<i64, f64> = want.iter().copied().collect();
    for (i, (id, s)) in got.iter().enumerate() {
        let w = exact
            .get(id)
            .unwrap_or_else(|| panic!("{what}: row {id} does not match"));
        assert!(close(*s, *w), "{what}: row {id} scored {s}, not {w}");
        assert!(
            close(*s, want_k[i].1),
            "{what}: place {i} holds {id} ({s}); brute force has {:?}",
            want_k[i]
        );
    }
}

pub(super) async fn setup(
    rows: usize,
    frag_rows: usize,
    seed: u64,
) -> (tempfile::TempDir, SessionContext, Model) {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let vocab = vocabulary();
    let ids: Vec<i64> = (0..rows as i64).collect();
    let bodies: Vec<Option<String>> = ids.iter().map(|_| body(&mut rng, &vocab)).collect();
    Dataset::write(
        &uri,
        &[batch(&ids, &bodies)],
        WriteMode::Create,
        WriteParams {
            max_rows_per_file: frag_rows,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ctx = new_session(None).unwrap();
    let options = TableOptions {
        with_row_addr: true,
        ..Default::default()
    };
    register_dataset(&ctx, "t", &uri, options).await.unwrap();
    let mut m = Model {
        rows: ids
            .iter()
            .zip(bodies)
            .map(|(id, body)| Row {
                id: *id,
                body,
                live: true,
                indexed: false,
                fragment: 0,
            })
            .collect(),
    };
    m.refresh(&ctx).await;
    (dir, ctx, m)
}

/// Indexes `body` with positions; every row is then taken by the index.
pub(super) async fn index_body(ctx: &SessionContext, m: &mut Model) {
    run_sql(
        ctx,
        "CREATE INDEX body_idx ON t USING INVERTED (body) WITH (with_position = true)",
    )
    .await
    .unwrap();
    for r in m.rows.iter_mut() {
        r.indexed = true;
    }
}

#[test]
fn vocabulary_is_kept_by_the_analyzer() {
    let a = fathom_index::fts::Analyzer::new(&Default::default()).unwrap();
    for w in vocabulary() {
        assert_eq!(a.tokens(&w.to_uppercase()), std::slice::from_ref(&w), "{w}");
    }
    assert!(a.tokens("The of, AND the").is_empty());
}

/// Random changes between checks; each check runs random OR and AND
/// queries, with and without a prefilter and a LIMIT, against the oracle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equals_brute_force_through_changes() {
    for (seed, (rows, frag_rows)) in [(2000, 700), (300, 9)].into_iter().enumerate() {
        let (_dir, ctx, mut m) = setup(rows, frag_rows, seed as u64).await;
        let mut rng = rand::rngs::StdRng::seed_from_u64(100 + seed as u64);
        let vocab = vocabulary();
        index_body(&ctx, &mut m).await;
        run_sql(&ctx, "CREATE INDEX cat_idx ON t USING BITMAP (cat)")
            .await
            .unwrap();
        let plan = text(
            &ctx,
            "EXPLAIN SELECT id, _score FROM fts('t', 'body', 'bab dok') WHERE cat = 'c1' ORDER BY _score DESC LIMIT 5",
        )
        .await;
        assert!(
            plan.contains("FtsExec") && plan.contains("index=body_idx") && plan.contains("k=5"),
            "{plan}"
        );
        assert!(plan.contains("prefilter=true"), "{plan}");
        let plan = text(
            &ctx,
            "EXPLAIN SELECT id FROM t WHERE text_match(body, 'bab dok') AND cat = 'c1'",
        )
        .await;
        assert!(
            plan.contains("FtsExec") && plan.contains("index=body_idx"),
            "{plan}"
        );
        let plan = text(
            &ctx,
            "EXPLAIN SELECT id FROM t WHERE text_match(body, 'bab dok') OR cat = 'c1'",
        )
        .await;
        assert!(!plan.contains("FtsExec"), "{plan}");
        let mut next_id = 100_000i64;
        let mut log: Vec<String> = vec![];
        for step in 0..8 {
            for (filter, keep) in [
                ("true", &(|_: &Row| true) as &dyn Fn(&Row) -> bool),
                ("cat = 'c3'", &|r: &Row| r.id.rem_euclid(5) == 3),
                ("id % 7 = 1", &|r: &Row| r.id % 7 == 1),
            ] {
                for _ in 0..3 {
                    let nq = rng.random_range(1..4);
                    let q: Vec<String> = (0..nq)
                        .map(|_| {
                            let r = (vocab.len() as f64).powf(rng.random_range(0.0..1.0)) as usize;
                            vocab[r.min(vocab.len() - 1)].clone()
                        })
                        .collect();
                    // Boolean clauses sometimes: `+word` required,
                    // `-word` excluded (each word once).
                    let boolean = rng.random_bool(0.3);
                    let mut seen = HashSet::new();
                    let q: Vec<String> = q
                        .into_iter()
                        .filter(|w| !boolean || seen.insert(w.clone()))
                        .map(|w| match (boolean, rng.random_range(0..4)) {
                            (true, 0) => format!("+{w}"),
                            (true, 1) => format!("-{w}"),
                            _ => w,
                        })
                        .collect();
                    let q = q.join(" ");
                    let and = rng.random_bool(0.3);
                    let op = if and { ", 'AND'" } else { "" };
                    let want = m.search(&q, and, keep);
                    let what = format!("seed {seed} after {log:?}: '{q}'{op} WHERE {filter}");
                    // Every match, then the top k.
                    let all = scored(
                        &ctx,
                        &format!(
                            "SELECT id, _score FROM fts('t', 'body', '{q}'{op}) WHERE {filter} ORDER BY _score DESC, id"
                        ),
                    )
                    .await;
                    same(&all, &want, None, &what);
                    let k = [1, 10, 25][rng.random_range(0..3)];
                    let top = scored(
                        &ctx,
                        &format!(
                            "SELECT id, _score FROM fts('t', 'body', '{q}'{op}) WHERE {filter} ORDER BY _score DESC LIMIT {k}"
                        ),
                    )
                    .await;
                    same(&top, &want, Some(k), &format!("{what} k {k}"));
                    // The same query as a WHERE predicate: routed to the
                    // index beside the other filter, and flat under an OR.
                    let want_ids = |extra: &dyn Fn(&Row) -> bool| -> Vec<i64> {
                        let hit: HashSet<i64> = want.iter().map(|(id, _)| *id).collect();
                        let mut v: Vec<i64> = m
                            .rows
                            .iter()
                            .filter(|r| r.live && (hit.contains(&r.id) || extra(r)))
                            .map(|r| r.id)
                            .collect();
                        v.sort();
                        v
                    };
                    let got = ids(
                        &ctx,
                        &format!(
                            "SELECT id FROM t WHERE text_match(body, '{q}'{op}) AND {filter} ORDER BY id"
                        ),
                    )
                    .await;
                    assert_eq!(got, want_ids(&|_| false), "{what} text_match");
                    let want_or = {
                        // OR id % 11 = 4: keep applies to the text branch only.
                        let all = m.search(&q, and, &|_| true);
                        let hit: HashSet<i64> = all.iter().map(|(id, _)| *id).collect();
                        let mut v: Vec<i64> = m
                            .rows
                            .iter()
                            .filter(|r| {
                                r.live && ((hit.contains(&r.id) && keep(r)) || r.id % 11 == 4)
                            })
                            .map(|r| r.id)
                            .collect();
                        v.sort();
                        v
                    };
                    let got = ids(
                        &ctx,
                        &format!(
                            "SELECT id FROM t WHERE (text_match(body, '{q}'{op}) AND {filter}) OR id % 11 = 4 ORDER BY id"
                        ),
                    )
                    .await;
                    assert_eq!(got, want_or, "{what} text_match OR");
                }
                // A phrase: 2 or 3 adjacent words of a live row.
                let live: Vec<&Row> = m
                    .rows
                    .iter()
                    .filter(|r| r.live && r.body.as_ref().is_some_and(|b| tokens(b).len() >= 3))
                    .collect();
                let r = live[rng.random_range(0..live.len())];
                let words: Vec<&str> = r
                    .body
                    .as_ref()
                    .unwrap()
                    .split([' ', ','])
                    .filter(|w| !w.is_empty())
                    .collect();
                let n = rng.random_range(2..=3).min(words.len());
                let at = rng.random_range(0..=words.len() - n);
                // Sometimes a slop, and then sometimes the middle word of
                // three left out (the row still matches).
                let slop = [0, 0, 1, 2][rng.random_range(0..4)];
                let q = if slop > 0 && n == 3 && rng.random_bool(0.5) {
                    format!("{} {}", words[at], words[at + 2])
                } else {
                    words[at..at + n].join(" ")
                };
                let want = m.search_as(&q, false, Some(slop), keep);
                let q = if slop > 0 {
                    format!("{q}\"~{slop}")
                } else {
                    format!("{q}\"")
                };
                let q = format!("\"{q}");
                assert!(
                    !want.is_empty() || !keep(r),
                    "phrase '{q}' from row {}",
                    r.id
                );
                let what = format!("seed {seed} after {log:?}: phrase '{q}' WHERE {filter}");
                for sql in [
                    format!(
                        "SELECT id, _score FROM fts('t', 'body', '{q}') WHERE {filter} ORDER BY _score DESC, id"
                    ),
                    format!(
                        "SELECT id, _score FROM fts('t', 'body', '{q}', 'phrase') WHERE {filter} ORDER BY _score DESC, id"
                    ),
                ] {
                    same(&scored(&ctx, &sql).await, &want, None, &what);
                }
                let top = scored(
                    &ctx,
                    &format!("SELECT id, _score FROM fts('t', 'body', '{q}') WHERE {filter} ORDER BY _score DESC LIMIT 3"),
                )
                .await;
                same(&top, &want, Some(3), &what);
                let mut want_ids: Vec<i64> = want.iter().map(|(id, _)| *id).collect();
                want_ids.sort();
                let got = ids(
                    &ctx,
                    &format!(
                        "SELECT id FROM t WHERE text_match(body, '{q}') AND {filter} ORDER BY id"
                    ),
                )
                .await;
                assert_eq!(got, want_ids, "{what} text_match");
            }
            if step == 7 {
                break;
            }
            match rng.random_range(0..6) {
                0 => {
                    let n = rng.random_range(20..300);
                    let ids: Vec<i64> = (next_id..next_id + n).collect();
                    next_id += n;
                    let bodies: Vec<Option<String>> =
                        ids.iter().map(|_| body(&mut rng, &vocab)).collect();
                    m.append(&ctx, ids, bodies, frag_rows).await;
                    log.push(format!("append {n}"));
                }
                1 => {
                    let k = rng.random_range(3..9);
                    run_sql(&ctx, &format!("DELETE FROM t WHERE id % {k} = 0"))
                        .await
                        .unwrap();
                    for r in m.rows.iter_mut().filter(|r| r.id % k == 0) {
                        r.live = false;
                    }
                    log.push(format!("delete %{k}"));
                }
                2 => {
                    // Rows move to a new fragment (rewritten), or their
                    // columns are rewritten in place (the touched
                    // fragments leave the index, deleted rows there
                    // included) or overlaid (the index keeps the
                    // fragments; only the overlaid rows' documents leave
                    // it, their new text scored flat).
                    let k = rng.random_range(5..13);
                    let mode = ["rows", "columns", "overlay"][rng.random_range(0..3)];
                    let columns = mode != "rows";
                    m.refresh(&ctx).await;
                    run_sql(&ctx, &format!("SET fathom.update_mode = '{mode}'"))
                        .await
                        .unwrap();
                    run_sql(
                        &ctx,
                        &format!(
                            "UPDATE t SET id = id + 1000000, body = body || ' zuz' WHERE id % {k} = 2"
                        ),
                    )
                    .await
                    .unwrap();
                    if columns {
                        let touched: HashSet<u64> = m
                            .rows
                            .iter()
                            .filter(|r| r.live && r.id % k == 2)
                            .map(|r| r.fragment)
                            .collect();
                        for r in m.rows.iter_mut() {
                            if mode == "columns" && touched.contains(&r.fragment) {
                                r.indexed = false;
                            }
                            if r.live && r.id % k == 2 {
                                r.indexed = false;
                                r.id += 1_000_000;
                                r.body = r.body.as_ref().map(|b| format!("{b} zuz"));
                            }
                        }
                    } else {
                        let moved: Vec<Row> = m
                            .rows
                            .iter_mut()
                            .filter(|r| r.live && r.id % k == 2)
                            .map(|r| {
                                r.live = false;
                                Row {
                                    id: r.id + 1_000_000,
                                    body: r.body.as_ref().map(|b| format!("{b} zuz")),
                                    live: true,
                                    indexed: false,
                                    fragment: 0,
                                }
                            })
                            .collect();
                        m.rows.extend(moved);
                    }
                    log.push(format!("update %{k} ({mode})"));
                }
                3 => {
                    run_sql(
                        &ctx,
                        "CREATE INDEX IF NOT EXISTS body_idx ON t USING INVERTED (body)",
                    )
                    .await
                    .unwrap();
                    for r in m.rows.iter_mut().filter(|r| r.live) {
                        r.indexed = true;
                    }
                    log.push("extend".into());
                }
                4 => {
                    // Compaction: rewritten rows leave the index, and come
                    // back when it is extended over the new fragments.
                    let target = rng.random_range(5..400);
                    let reindex = rng.random_bool(0.5);
                    // Deferred: the segments keep the rows they had (a
                    // fragment reuse index remaps them).
                    let defer = rng.random_bool(0.5);
                    // Rewritten: the segments name the moved rows by their
                    // new addresses (as if deferred, then remapped).
                    let remap = rng.random_bool(0.5);
                    let before: HashMap<i64, u64> = m
                        .rows
                        .iter()
                        .filter(|r| r.live)
                        .map(|r| (r.id, r.fragment))
                        .collect();
                    run_sql(
                        &ctx,
                        &format!(
                            "OPTIMIZE t WITH (target_rows_per_fragment = {target}, reindex = {reindex}, defer_index_remap = {defer}, remap_indexes = {remap})"
                        ),
                    )
                    .await
                    .unwrap();
                    m.refresh(&ctx).await;
                    let moved = m.rows.iter().any(|r| r.live && before[&r.id] != r.fragment);
                    for r in m.rows.iter_mut().filter(|r| r.live) {
                        if reindex && moved {
                            r.indexed = true;
                        } else if before[&r.id] != r.fragment && !defer && !remap {
                            r.indexed = false;
                        }
                    }
                    log.push(format!(
                        "compact {target} reindex {reindex} defer {defer} remap {remap}"
                    ));
                }
                _ => {
                    run_sql(&ctx, "REINDEX body_idx ON t").await.unwrap();
                    for r in m.rows.iter_mut() {
                        r.indexed = r.live;
                    }
                    log.push("rebuild".into());
                }
            }
            m.refresh(&ctx).await;
        }
    }
}

/// A column without an inverted index is searched flat, with the same
/// results; bad calls are clear errors.
/// The most frequent words hold thousands of rows in many posting blocks
/// each, so AND, phrase and boolean top k go through many windows of the
/// intersection, most skipped by their block maxima once the top k fills:
/// every result equals brute force, with and without a prefilter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dense_terms_top_k_equals_brute_force() {
    let (_dir, ctx, mut m) = setup(12_000, 12_000, 21).await;
    index_body(&ctx, &mut m).await;
    let vocab = vocabulary();
    let mut rng = rand::rngs::StdRng::seed_from_u64(2121);
    for i in 0..18 {
        // Among the six most frequent words (Zipf rank 1..6); phrases of
        // two (three such words in a row are too rare).
        let n = if i % 3 == 1 {
            2
        } else {
            rng.random_range(2..=3)
        };
        let w: Vec<&str> = (0..n)
            .map(|_| vocab[rng.random_range(0..6)].as_str())
            .collect();
        let (filter, keep): (&str, &dyn Fn(&Row) -> bool) = if i % 3 == 2 {
            ("id % 4 = 1", &|r: &Row| r.id % 4 == 1)
        } else {
            ("true", &|_: &Row| true)
        };
        let (q, op, want) = match i % 3 {
            0 => {
                let q = w.join(" ");
                let want = m.search(&q, true, keep);
                (q, ", 'AND'", want)
            }
            1 => {
                let slop = [0, 1][rng.random_range(0..2)];
                let q = w.join(" ");
                let want = m.search_as(&q, false, Some(slop), keep);
                let q = if slop > 0 {
                    format!("\"{q}\"~{slop}")
                } else {
                    format!("\"{q}\"")
                };
                (q, "", want)
            }
            _ => {
                let q = format!("+{} +{} {}", w[0], vocab[6 + i], w[1]);
                let want = m.search(&q, false, keep);
                (q, "", want)
            }
        };
        assert!(want.len() > 10, "'{q}' is not dense: {} rows", want.len());
        for k in [1, 10, 100] {
            let top = scored(
                &ctx,
                &format!(
                    "SELECT id, _score FROM fts('t', 'body', '{q}'{op}) WHERE {filter} ORDER BY _score DESC LIMIT {k}"
                ),
            )
            .await;
            same(
                &top,
                &want,
                Some(k),
                &format!("'{q}'{op} WHERE {filter} k {k}"),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flat_without_index_and_errors() {
    let (_dir, ctx, m) = setup(500, 200, 7).await;
    let q = "bab dok gum";
    let want = m.search(q, false, &|_| true);
    let sql =
        format!("SELECT id, _score FROM fts('t', 'body', '{q}') ORDER BY _score DESC LIMIT 10");
    same(&scored(&ctx, &sql).await, &want, Some(10), "flat");
    let plan = text(&ctx, &format!("EXPLAIN {sql}")).await;
    assert!(plan.contains("no index (flat)"), "{plan}");
    // Boolean clauses, flat and (below) indexed; excluded words alone
    // match nothing.
    let bool_q = "+bab dok -gum";
    let bool_want = m.search(bool_q, false, &|_| true);
    assert!(!bool_want.is_empty());
    let bool_sql =
        format!("SELECT id, _score FROM fts('t', 'body', '{bool_q}') ORDER BY _score DESC, id");
    same(
        &scored(&ctx, &bool_sql).await,
        &bool_want,
        None,
        "flat boolean",
    );
    let neg_sql = "SELECT id, _score FROM fts('t', 'body', '-bab -dok')";
    assert!(scored(&ctx, neg_sql).await.is_empty());
    let mut want_ids: Vec<i64> = want.iter().map(|(id, _)| *id).collect();
    want_ids.sort();
    let match_sql = format!("SELECT id FROM t WHERE text_match(body, '{q}') ORDER BY id");
    assert_eq!(ids(&ctx, &match_sql).await, want_ids, "flat text_match");
    run_sql(&ctx, "CREATE INDEX body_idx ON t USING INVERTED (body)")
        .await
        .unwrap();
    same(&scored(&ctx, &sql).await, &want, Some(10), "indexed");
    assert_eq!(ids(&ctx, &match_sql).await, want_ids, "indexed text_match");
    same(
        &scored(&ctx, &bool_sql).await,
        &bool_want,
        None,
        "indexed boolean",
    );
    assert!(scored(&ctx, neg_sql).await.is_empty());
    let n = text(
        &ctx,
        &format!("SELECT count(*) FROM t WHERE text_match(body, '{q}')"),
    )
    .await;
    assert!(n.contains(&format!("| {} ", want_ids.len())), "{n}");

    for (bad, msg) in [
        (
            "SELECT * FROM fts('t', 'nope', 'x')",
            "no column named 'nope'",
        ),
        ("SELECT * FROM fts('t', 'id', 'x')", "not text"),
        ("SELECT * FROM fts('nope', 'body', 'x')", "nope"),
        ("SELECT * FROM fts('t', 'body')", "usage"),
        (
            "SELECT * FROM fts('t', 'body', 'x', 'XOR')",
            "'OR', 'AND' or 'PHRASE'",
        ),
        ("SELECT * FROM fts('t', 'body', '\"bab dok')", "unbalanced"),
        ("SELECT id FROM t WHERE text_match(id, 'x')", "must be text"),
        (
            "SELECT id FROM t WHERE text_match(body, 'x', 'XOR')",
            "'OR', 'AND' or 'PHRASE'",
        ),
        ("SELECT id FROM t WHERE text_match(body)", "usage"),
        (
            "SELECT * FROM fts('t', 'body', 'bab + dok')",
            "'+' must be followed by a word",
        ),
        (
            "SELECT * FROM fts('t', 'body', '+bab -bab')",
            "'bab' is both required or wanted and excluded",
        ),
        (
            "SELECT id FROM t WHERE text_match(body, 'bab -')",
            "'-' must be followed by a word",
        ),
    ] {
        let e = match ctx.sql(bad).await {
            Ok(df) => df.collect().await.map(|_| ()).unwrap_err(),
            Err(e) => e,
        };
        assert!(e.to_string().contains(msg), "{bad}: {e}");
    }
    // A phrase needs positions, which this index was built without.
    let e = ctx
        .sql("SELECT * FROM fts('t', 'body', '\"bab dok\"')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("with_position = true"), "{e}");
    for bad in [
        "CREATE INDEX i ON t USING INVERTED (id)",
        "CREATE INDEX i ON t USING INVERTED (body) WITH (base_tokenizer = 'icu')",
        "CREATE INDEX i ON t USING INVERTED (body) WITH (stem = 'maybe')",
    ] {
        assert!(run_sql(&ctx, bad).await.is_err(), "{bad}");
    }
}

/// Pylance 14's scores for its golden 3-document corpus (research:
/// lance-index-bytes.md 3.7), with our index and without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_scores_equal_pylance() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.lance").to_str().unwrap().to_string();
    let docs = [
        "The quick brown fox",
        "The lazy dog runs",
        "quick quick dog jumping over the fox",
    ];
    let b = batch(&[0, 1, 2], &docs.map(|d| Some(d.to_string())));
    Dataset::write(&uri, &[b], WriteMode::Create, WriteParams::default())
        .await
        .unwrap();
    let ctx = new_session(None).unwrap();
    register_dataset(&ctx, "t", &uri, TableOptions::default())
        .await
        .unwrap();
    let golden: [(&str, &[(i64, f32)]); 10] = [
        ("quick", &[(2, 0.5862932), (0, 0.5077718)]),
        ("fox", &[(0, 0.5077718), (2, 0.4091399)]),
        ("quick fox", &[(0, 1.0155436), (2, 0.9954331)]),
        (
            "brown dog",
            &[(0, 1.0596459), (1, 0.5077718), (2, 0.4091399)],
        ),
        ("jumps", &[(2, 0.8538153)]),
        ("LAZY", &[(1, 1.0596459)]),
        ("the over", &[]),
        ("\"quick brown\"", &[(0, 1.56742)]),
        ("\"quick fox\"", &[]),
        ("\"brown quick\"", &[]),
    ];
    for indexed in [false, true] {
        if indexed {
            run_sql(
                &ctx,
                "CREATE INDEX body_idx ON t USING INVERTED (body) WITH (with_position = true)",
            )
            .await
            .unwrap();
        }
        for (q, want) in golden {
            let got = scored(
                &ctx,
                &format!("SELECT id, _score FROM fts('t', 'body', '{q}') ORDER BY _score DESC, id"),
            )
            .await;
            assert_eq!(got.len(), want.len(), "{q} (indexed {indexed}): {got:?}");
            for (g, w) in got.iter().zip(want) {
                assert!(
                    g.0 == w.0 && (g.1 - w.1).abs() < 1e-5,
                    "{q} (indexed {indexed}): {got:?}"
                );
            }
        }
    }
}

/// A row's multi-column score: its best boosted score over the columns.
fn best_of(per_column: &[(f64, Vec<(i64, f64)>)]) -> Vec<(i64, f64)> {
    let mut best: HashMap<i64, f64> = HashMap::new();
    for (boost, hits) in per_column {
        for (id, s) in hits {
            let e = best.entry(*id).or_insert(boost * s);
            *e = e.max(boost * s);
        }
    }
    let mut out: Vec<(i64, f64)> = best.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_column_match_with_boosts_equals_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let vocab = vocabulary();
    let two = |ids: &[i64], rng: &mut rand::rngs::StdRng| {
        let bodies: Vec<Option<String>> = ids.iter().map(|_| body(rng, &vocab)).collect();
        let titles: Vec<Option<String>> = ids.iter().map(|_| body(rng, &vocab)).collect();
        let b = batch(ids, &bodies);
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                b.schema().field(0).clone(),
                b.schema().field(1).clone(),
                b.schema().field(2).clone(),
                Field::new("title", DataType::Utf8, true),
            ])),
            vec![
                b.column(0).clone(),
                b.column(1).clone(),
                b.column(2).clone(),
                Arc::new(StringArray::from(titles.clone())),
            ],
        )
        .unwrap();
        (b, bodies, titles)
    };
    let rows = |ids: &[i64], texts: Vec<Option<String>>| -> Vec<Row> {
        ids.iter()
            .zip(texts)
            .map(|(id, body)| Row {
                id: *id,
                body,
                live: true,
                indexed: false,
                fragment: 0,
            })
            .collect()
    };
    let ids: Vec<i64> = (0..900).collect();
    let (b, bodies, titles) = two(&ids, &mut rng);
    Dataset::write(
        &uri,
        &[b],
        WriteMode::Create,
        WriteParams {
            max_rows_per_file: 250,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ctx = new_session(None).unwrap();
    let options = TableOptions {
        with_row_addr: true,
        ..Default::default()
    };
    register_dataset(&ctx, "t", &uri, options).await.unwrap();
    let mut body_m = Model {
        rows: rows(&ids, bodies),
    };
    let mut title_m = Model {
        rows: rows(&ids, titles),
    };
    // Both columns flat; then body indexed, title flat; then both, with
    // appended rows neither index covers and deleted rows.
    for phase in 0..3 {
        match phase {
            1 => {
                run_sql(&ctx, "CREATE INDEX body_idx ON t USING INVERTED (body)")
                    .await
                    .unwrap();
                for r in body_m.rows.iter_mut() {
                    r.indexed = true;
                }
            }
            2 => {
                run_sql(&ctx, "CREATE INDEX title_idx ON t USING INVERTED (title)")
                    .await
                    .unwrap();
                for r in title_m.rows.iter_mut() {
                    r.indexed = true;
                }
                let more: Vec<i64> = (5000..5300).collect();
                let (b, bodies, titles) = two(&more, &mut rng);
                let ds = Dataset::open(&uri).await.unwrap();
                ds.append(&[b], &WriteParams::default()).await.unwrap();
                body_m.rows.extend(rows(&more, bodies));
                title_m.rows.extend(rows(&more, titles));
                run_sql(&ctx, "DELETE FROM t WHERE id % 11 = 3")
                    .await
                    .unwrap();
                for m in [&mut body_m, &mut title_m] {
                    for r in m.rows.iter_mut().filter(|r| r.id % 11 == 3) {
                        r.live = false;
                    }
                }
            }
            _ => {}
        }
        body_m.refresh(&ctx).await;
        title_m.refresh(&ctx).await;
        for (columns, boosts) in [
            ("title^2, body", [2.0, 1.0]),
            ("title, body^0.5", [1.0, 0.5]),
            ("body,title", [1.0, 1.0]),
        ] {
            for _ in 0..4 {
                let nq = rng.random_range(1..4);
                let q: Vec<String> = (0..nq)
                    .map(|_| {
                        let r = (vocab.len() as f64).powf(rng.random_range(0.0..1.0)) as usize;
                        vocab[r.min(vocab.len() - 1)].clone()
                    })
                    .collect();
                let q = q.join(" ");
                let and = rng.random_bool(0.3);
                let op = if and { ", 'AND'" } else { "" };
                for (filter, keep) in [
                    ("true", &(|_: &Row| true) as &dyn Fn(&Row) -> bool),
                    ("cat = 'c2'", &|r: &Row| r.id.rem_euclid(5) == 2),
                ] {
                    // Title first in the list or not: boosts go with names.
                    let (tb, bb) = if columns.starts_with("title") {
                        (boosts[0], boosts[1])
                    } else {
                        (boosts[1], boosts[0])
                    };
                    let want = best_of(&[
                        (tb, title_m.search(&q, and, keep)),
                        (bb, body_m.search(&q, and, keep)),
                    ]);
                    let what = format!("phase {phase}: fts('{columns}', '{q}'{op}) WHERE {filter}");
                    let all = scored(
                        &ctx,
                        &format!(
                            "SELECT id, _score FROM fts('t', '{columns}', '{q}'{op}) WHERE {filter} ORDER BY _score DESC, id"
                        ),
                    )
                    .await;
                    same(&all, &want, None, &what);
                    for k in [1, 10] {
                        let top = scored(
                            &ctx,
                            &format!(
                                "SELECT id, _score FROM fts('t', '{columns}', '{q}'{op}) WHERE {filter} ORDER BY _score DESC LIMIT {k}"
                            ),
                        )
                        .await;
                        same(&top, &want, Some(k), &format!("{what} k {k}"));
                    }
                }
            }
        }
    }
    let plan = text(
        &ctx,
        "EXPLAIN SELECT id, _score FROM fts('t', 'title^2, body', 'bab') ORDER BY _score DESC LIMIT 3",
    )
    .await;
    assert!(
        plan.contains("columns=[title^2, body]")
            && plan.contains("title: index=title_idx")
            && plan.contains("body: index=body_idx")
            && plan.contains("k=3"),
        "{plan}"
    );
    for (bad, msg) in [
        ("title^0", "must be a positive number"),
        ("title^x", "is not a number"),
        ("title, nope", "no column named 'nope'"),
        ("title, title", "listed twice"),
        ("title, id", "not text"),
        ("title,", "empty column name"),
    ] {
        let e = ctx
            .sql(&format!("SELECT id FROM fts('t', '{bad}', 'bab')"))
            .await
            .err()
            .unwrap_or_else(|| panic!("{bad}: accepted"))
            .to_string();
        assert!(e.contains(msg), "{bad}: {e}");
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

impl Model {
    /// `query` with each fuzzy word (`w~`, `w~N`; automatic distance 1
    /// for the 3-letter words here) replaced by the terms of the counted
    /// rows within its distance, the first 50 in byte order.
    pub(super) fn expand_fuzzy(&self, query: &str) -> String {
        self.expand_fuzzy_with(query, 50, 0)
    }

    /// As `expand_fuzzy`, with at most `max` terms per fuzzy word, each
    /// starting with the word's first `prefix` characters.
    fn expand_fuzzy_with(&self, query: &str, max: usize, prefix: usize) -> String {
        let vocab: std::collections::BTreeSet<String> = self
            .counted()
            .iter()
            .flat_map(|r| r.body.as_deref().map(tokens).unwrap_or_default())
            .collect();
        query
            .split_whitespace()
            .map(|w| match w.split_once('~') {
                Some((word, d)) => {
                    let d: usize = if d.is_empty() { 1 } else { d.parse().unwrap() };
                    let word = word.to_lowercase();
                    let head: String = word.chars().take(prefix).collect();
                    vocab
                        .iter()
                        .filter(|t| t.starts_with(&head) && levenshtein(t, &word) <= d)
                        .take(max)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" ")
                }
                None => w.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzy_terms_equal_brute_force() {
    let (dir, ctx, mut m) = setup(1200, 400, 23).await;
    let uri = dir.path().join("t.lance").to_str().unwrap().to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    let vocab = vocabulary();
    // Fuzzy terms beside plain, required and excluded ones.
    let queries = [
        "bab~",
        "BAB~2",
        "dok~1 gum",
        "zuz~0 kap~",
        "pom~ -bab",
        "vog~ +dab",
    ];
    // Flat, then indexed, then with deleted rows (still in the index's
    // vocabulary and statistics) and appended rows on the flat path.
    for phase in 0..3 {
        match phase {
            1 => {
                run_sql(&ctx, "CREATE INDEX body_idx ON t USING INVERTED (body)")
                    .await
                    .unwrap();
                for r in m.rows.iter_mut() {
                    r.indexed = true;
                }
            }
            2 => {
                run_sql(&ctx, "DELETE FROM t WHERE id % 7 = 2")
                    .await
                    .unwrap();
                for r in m.rows.iter_mut().filter(|r| r.id % 7 == 2) {
                    r.live = false;
                }
                let ids: Vec<i64> = (9000..9300).collect();
                let bodies: Vec<Option<String>> =
                    ids.iter().map(|_| body(&mut rng, &vocab)).collect();
                Dataset::open(&uri)
                    .await
                    .unwrap()
                    .append(&[batch(&ids, &bodies)], &WriteParams::default())
                    .await
                    .unwrap();
                m.rows.extend(ids.iter().zip(bodies).map(|(id, body)| Row {
                    id: *id,
                    body,
                    live: true,
                    indexed: false,
                    fragment: 0,
                }));
            }
            _ => {}
        }
        m.refresh(&ctx).await;
        for q in queries {
            let expanded = m.expand_fuzzy(q);
            for (filter, keep) in [
                ("true", &(|_: &Row| true) as &dyn Fn(&Row) -> bool),
                ("cat = 'c4'", &|r: &Row| r.id.rem_euclid(5) == 4),
            ] {
                let want = m.search(&expanded, false, keep);
                assert!(!want.is_empty(), "{q}");
                let what = format!("phase {phase}: '{q}' as '{expanded}' WHERE {filter}");
                let all = scored(
                    &ctx,
                    &format!(
                        "SELECT id, _score FROM fts('t', 'body', '{q}') WHERE {filter} ORDER BY _score DESC, id"
                    ),
                )
                .await;
                same(&all, &want, None, &what);
                let top = scored(
                    &ctx,
                    &format!(
                        "SELECT id, _score FROM fts('t', 'body', '{q}') WHERE {filter} ORDER BY _score DESC LIMIT 10"
                    ),
                )
                .await;
                same(&top, &want, Some(10), &format!("{what} k 10"));
            }
        }
    }
    // BAB~2 reaches more than 50 terms here: the cap is exercised.
    assert!(m.expand_fuzzy("bab~2").split(' ').count() == 50);
    // Lance's other fuzzy knobs, as session settings: fewer expansions,
    // and a prefix each expansion keeps.
    for (max, prefix) in [(7, 0), (50, 1), (3, 2)] {
        run_sql(&ctx, &format!("SET fathom.fts_max_expansions = {max}"))
            .await
            .unwrap();
        run_sql(&ctx, &format!("SET fathom.fts_prefix_length = {prefix}"))
            .await
            .unwrap();
        for q in queries {
            let expanded = m.expand_fuzzy_with(q, max, prefix);
            let want = m.search(&expanded, false, &|_| true);
            let what =
                format!("max_expansions {max}, prefix_length {prefix}: '{q}' as '{expanded}'");
            let all = scored(
                &ctx,
                &format!("SELECT id, _score FROM fts('t', 'body', '{q}') ORDER BY _score DESC, id"),
            )
            .await;
            same(&all, &want, None, &what);
        }
    }
    assert_eq!(m.expand_fuzzy_with("bab~2", 7, 0).split(' ').count(), 7);
    assert!(
        m.expand_fuzzy_with("bab~2", 50, 1)
            .split(' ')
            .all(|t| t.starts_with('b'))
    );
    run_sql(&ctx, "SET fathom.fts_max_expansions = 50")
        .await
        .unwrap();
    run_sql(&ctx, "SET fathom.fts_prefix_length = 0")
        .await
        .unwrap();
    for (bad, msg) in [("bab~3", "0, 1 or 2"), ("bab~x", "0, 1 or 2")] {
        let e = ctx
            .sql(&format!("SELECT id FROM fts('t', 'body', '{bad}')"))
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(msg), "{bad}: {e}");
    }
    let e = ctx
        .sql("SELECT id FROM t WHERE text_match(body, 'bab~')")
        .await
        .unwrap()
        .collect()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("use fts(...)"), "{e}");
    assert!(
        fathom_index::fts::search::Fuzzy::auto("bab") == 1
            && fathom_index::fts::search::Fuzzy::auto("ab") == 0
            && fathom_index::fts::search::Fuzzy::auto("babbab") == 2
    );
}

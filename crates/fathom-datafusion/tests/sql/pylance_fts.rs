//! Inverted indexes with pylance 14 both ways, on a fully indexed table
//! (where pylance's statistics are the table's). Pylance's index: we
//! search it and return the documents and scores pylance returns. Ours:
//! pylance lists it, its plan searches it, and it returns the documents
//! and scores we return, which are those of pylance's own index on the
//! same data. Skipped without pylance unless FATHOM_REQUIRE_PYLANCE=1.

use std::io::Write;
use std::process::{Command, Stdio};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type};
use datafusion::prelude::SessionContext;
use fathom_datafusion::sql::run_sql;
use fathom_datafusion::{TableOptions, new_session, register_dataset};

fn script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/pylance_fts.py")
}

fn py(py: &str, args: &[&str], stdin: &str) -> String {
    let mut c = Command::new(py)
        .arg(script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

type Hits = Vec<(i64, f32)>;

struct Theirs {
    types: Vec<String>,
    results: Vec<Hits>,
    plan: String,
}

fn pylance_search(py_: &str, dir: &str, k: usize, qs: &[(String, &str)]) -> Theirs {
    let input: Vec<serde_json::Value> = qs
        .iter()
        .map(|(q, op)| serde_json::json!({"q": q, "op": op}))
        .collect();
    let out = py(
        py_,
        &["search", dir, &k.to_string()],
        &serde_json::to_string(&input).unwrap(),
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    Theirs {
        types: v["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect(),
        results: v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(hits_of)
            .collect(),
        plan: v["plan"].as_str().unwrap_or_default().to_string(),
    }
}

/// One query's result in the script's output.
fn hits_of(r: &serde_json::Value) -> Hits {
    let ids = r["ids"].as_array().unwrap();
    let s = r["scores"].as_array().unwrap();
    ids.iter()
        .zip(s)
        .map(|(i, s)| (i.as_i64().unwrap(), s.as_f64().unwrap() as f32))
        .collect()
}

async fn ours(ctx: &SessionContext, q: &str, op: &str, k: usize) -> Hits {
    ours_on(ctx, "body", q, op, k).await
}

async fn ours_on(ctx: &SessionContext, columns: &str, q: &str, op: &str, k: usize) -> Hits {
    let sql = format!(
        "SELECT id, _score FROM fts('t', '{columns}', '{q}', '{op}') ORDER BY _score DESC LIMIT {k}"
    );
    let b = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
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

/// Same scores place by place (1e-4), and the same rows except among
/// those tied at the last place.
fn same(got: &Hits, want: &Hits, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
    for (g, w) in got.iter().zip(want) {
        assert!(close(g.1, w.1), "{what}: {got:?} vs {want:?}");
    }
    if let Some(last) = want.last() {
        let above = |h: &Hits| {
            let mut v: Vec<i64> = h
                .iter()
                .filter(|x| !close(x.1, last.1))
                .map(|x| x.0)
                .collect();
            v.sort();
            v
        };
        assert_eq!(above(got), above(want), "{what}: {got:?} vs {want:?}");
    }
}

/// Boolean clauses first (and, with positions, a phrase), then match
/// queries (the last query's plan is checked).
fn queries(with_position: bool) -> Vec<(String, &'static str)> {
    let vocab: Vec<String> = "bdfgkmpvz"
        .chars()
        .flat_map(|a| {
            "aou"
                .chars()
                .flat_map(move |b| "bdgkmpz".chars().map(move |c| format!("{a}{b}{c}")))
        })
        .collect();
    // A frequent word, a rare one, pairs and triples, upper case, a word
    // in no document, stop words.
    let mut qs = vec![
        (format!("+{} {} -{}", vocab[0], vocab[1], vocab[2]), "OR"),
        (format!("{} -{} {}", vocab[3], vocab[0], vocab[9]), "OR"),
        (format!("+{} +{}", vocab[1], vocab[4]), "OR"),
    ];
    if with_position {
        qs.extend([(format!("\"{} {}\"", vocab[0], vocab[1]), "PHRASE")]);
        // Nested boolean queries: phrases and groups as clauses.
        let v = &vocab;
        qs.extend([
            (format!("+\"{} {}\" {}", v[0], v[1], v[3]), "OR"),
            (format!("+({} {}) -{}", v[1], v[4], v[0]), "OR"),
            (format!("{} -\"{} {}\"", v[3], v[0], v[1]), "OR"),
            (
                format!(
                    "({} +{}) ({} -{}) \"{} {}\"~1",
                    v[0], v[1], v[2], v[3], v[1], v[0]
                ),
                "OR",
            ),
            (format!("{} ({} {})", v[0], v[1], v[2]), "AND"),
        ]);
    }
    qs.extend([
        (vocab[0].clone(), "OR"),
        (vocab[150].clone(), "OR"),
        (format!("{} {}", vocab[1], vocab[7]), "OR"),
        (format!("{} {}", vocab[0], vocab[2]), "AND"),
        (format!("{} {} {}", vocab[3], vocab[40], vocab[90]), "OR"),
        (vocab[5].to_uppercase(), "OR"),
        ("nothing matches".to_string(), "OR"),
        ("the of".to_string(), "OR"),
    ]);
    qs
}

async fn session(dir: &str) -> SessionContext {
    let ctx = new_session(None).unwrap();
    register_dataset(
        &ctx,
        "t",
        &format!("{dir}/t.lance"),
        TableOptions::default(),
    )
    .await
    .unwrap();
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inverted_indexes_both_ways() {
    let Some(python) = fathom_testing::pylance_python() else {
        return;
    };
    let k = 10;
    for with_position in [false, true] {
        let qs = queries(with_position);
        // Pylance's index, searched by us.
        let theirs_dir = tempfile::tempdir().unwrap();
        let td = theirs_dir.path().to_str().unwrap();
        py(&python, &["write", td, "3000"], "");
        let mut args = vec!["index", td];
        if with_position {
            args.push("with_position");
        }
        py(&python, &args, "");
        let t = pylance_search(&python, td, k, &qs);
        let ctx = session(td).await;
        let plan = super::common::text(
            &ctx,
            "EXPLAIN SELECT id FROM fts('t', 'body', 'bab') ORDER BY _score DESC LIMIT 3",
        )
        .await;
        assert!(plan.contains("index=body_idx"), "{plan}");
        for ((q, op), want) in qs.iter().zip(&t.results) {
            // The nested queries are chosen to match rows.
            assert!(
                *op == "PHRASE" || !q.contains(['(', '"']) || !want.is_empty(),
                "nested '{q}' matches nothing in pylance"
            );
            let got = ours(&ctx, q, op, k).await;
            same(
                &got,
                want,
                &format!("pylance's index, '{q}' {op}, positions {with_position}"),
            );
        }
        if !with_position {
            multi_match(&python, td, &ctx, k).await;
            fuzzy(&python, td, &ctx, k).await;
        }
        if with_position {
            // Phrases with slop, every match: each row pylance returns we
            // return with its score. Pylance's position check for a slop
            // advances every term together and misses some matches (for
            // `"a b c"~2`, `a c b c` has a at 0, b at 2, c at 3), which we
            // return: ours is a superset.
            let sloppy = [
                ("\"bab bad\"~1".to_string(), "PHRASE"),
                ("\"bad bab bag\"~2".to_string(), "PHRASE"),
            ];
            let all = 100_000;
            let t = pylance_search(&python, td, all, &sloppy);
            for ((q, op), want) in sloppy.iter().zip(&t.results) {
                let got: std::collections::HashMap<i64, f32> =
                    ours(&ctx, q, op, all).await.into_iter().collect();
                assert!(!want.is_empty() && got.len() >= want.len(), "{q}");
                for (id, score) in want {
                    let g = got.get(id).copied();
                    assert!(
                        g.is_some_and(|g| (g - score).abs() <= 1e-4 * score.abs().max(1.0)),
                        "{q}: row {id} pylance {score}, ours {g:?}"
                    );
                }
            }
        }

        // Ours, searched by pylance.
        let ours_dir = tempfile::tempdir().unwrap();
        let od = ours_dir.path().to_str().unwrap();
        py(&python, &["write", od, "3000"], "");
        let ctx = session(od).await;
        run_sql(
            &ctx,
            &format!(
                "CREATE INDEX body_idx ON t USING INVERTED (body) WITH (with_position = {with_position})"
            ),
        )
        .await
        .unwrap();
        let p = pylance_search(&python, od, k, &qs);
        assert_eq!(p.types, ["Inverted"], "pylance lists our index");
        assert!(p.plan.contains("MatchQuery"), "{}", p.plan);
        assert!(!p.plan.contains("FlatMatchQuery"), "{}", p.plan);
        for (((q, op), got), want) in qs.iter().zip(&p.results).zip(&t.results) {
            let what = format!("our index in pylance, '{q}' {op}, positions {with_position}");
            same(got, want, &what);
            same(&ours(&ctx, q, op, k).await, want, &what);
        }
    }
}

/// pylance's MultiMatchQuery with boosts (both columns indexed by
/// pylance) against `fts('t', 'title^2, body', ...)`: same rows, same
/// scores (a row's best boosted column score).
async fn multi_match(python: &str, td: &str, ctx: &SessionContext, k: usize) {
    py(python, &["index_title", td], "");
    let cases = [
        ("bab", "OR"),
        ("bad gab", "OR"),
        ("bab bad", "AND"),
        ("dak zum", "OR"),
    ];
    for (columns, spec) in [
        (
            "title^2, body",
            serde_json::json!([["title", 2.0], ["body", 1.0]]),
        ),
        (
            "body^1.5, title^0.5",
            serde_json::json!([["body", 1.5], ["title", 0.5]]),
        ),
    ] {
        let input: Vec<serde_json::Value> = cases
            .iter()
            .map(|(q, op)| serde_json::json!({"q": q, "op": op, "columns": spec}))
            .collect();
        let out = py(
            python,
            &["search", td, &k.to_string()],
            &serde_json::to_string(&input).unwrap(),
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        for ((q, op), r) in cases.iter().zip(v["results"].as_array().unwrap()) {
            let want = hits_of(r);
            assert!(!want.is_empty(), "{q}: pylance found nothing");
            let got = ours_on(ctx, columns, q, op, k).await;
            same(&got, &want, &format!("multi-match {columns} '{q}' {op}"));
        }
    }
}

/// pylance's fuzzy MatchQuery (its index) against `word~N` in fts(...).
async fn fuzzy(python: &str, td: &str, ctx: &SessionContext, k: usize) {
    let cases = [("bab", 1), ("gok", 2), ("vud", 1), ("zzz", 1)];
    let input: Vec<serde_json::Value> = cases
        .iter()
        .map(|(q, d)| serde_json::json!({"q": q, "op": "OR", "fuzziness": d}))
        .collect();
    let out = py(
        python,
        &["search", td, &k.to_string()],
        &serde_json::to_string(&input).unwrap(),
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for ((q, d), r) in cases.iter().zip(v["results"].as_array().unwrap()) {
        let want = hits_of(r);
        assert!(!want.is_empty(), "{q}~{d}: pylance found nothing");
        let got = ours(ctx, &format!("{q}~{d}"), "OR", k).await;
        same(&got, &want, &format!("fuzzy '{q}~{d}'"));
    }
}

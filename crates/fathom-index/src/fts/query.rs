//! Full-text queries: the query string parsed into terms and how they
//! combine (match any or all, phrase with slop, boolean `+must -not
//! should`, fuzzy `word~N`), the corpus statistics they are scored with,
//! and BM25 of one row.

use std::collections::HashMap;

use super::analyzer::Analyzer;
pub use super::nested::Clause;
use super::nested::mark_positive;
use super::posting;
use crate::error::Result;

/// How query terms combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    /// A row matches when it holds any term (scores add up).
    Or,
    /// A row matches when it holds every term.
    And,
    /// A row matches when it holds the terms at the query's relative
    /// positions (needs positions: `with_position` on the index). Scored
    /// as `And`, as Lance scores a phrase.
    Phrase,
}

impl MatchOp {
    pub fn name(&self) -> &'static str {
        match self {
            MatchOp::Or => "OR",
            MatchOp::And => "AND",
            MatchOp::Phrase => "PHRASE",
        }
    }

    /// `OR`, `AND` or `PHRASE` (any case).
    pub fn parse(s: &str) -> Option<MatchOp> {
        match s.to_ascii_uppercase().as_str() {
            "OR" => Some(MatchOp::Or),
            "AND" => Some(MatchOp::And),
            "PHRASE" => Some(MatchOp::Phrase),
            _ => None,
        }
    }

    /// Whether a row must hold every term.
    pub fn all_terms(&self) -> bool {
        !matches!(self, MatchOp::Or)
    }
}

/// Corpus statistics of a table version: documents (rows with at least
/// one token), their tokens, and each query term's document frequency.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Corpus {
    pub docs: u64,
    pub tokens: u64,
    pub df: HashMap<String, u64>,
}

impl Corpus {
    pub fn avgdl(&self) -> f32 {
        if self.docs == 0 {
            0.0
        } else {
            (self.tokens as f64 / self.docs as f64) as f32
        }
    }

    pub fn idf(&self, term: &str) -> f32 {
        posting::idf(self.df.get(term).copied().unwrap_or(0), self.docs)
    }

    /// Adds the statistics of one analyzed row: `tf` holds the frequency
    /// of each of `terms` in it, `len` its token count.
    pub fn add_row(&mut self, terms: &[String], tf: &[u32], len: u32) {
        if len == 0 {
            return;
        }
        self.docs += 1;
        self.tokens += len as u64;
        for (t, f) in terms.iter().zip(tf) {
            if *f > 0 {
                *self.df.entry(t.clone()).or_default() += 1;
            }
        }
    }

    /// Adds another part's statistics.
    pub fn merge(&mut self, o: &Corpus) {
        self.docs += o.docs;
        self.tokens += o.tokens;
        for (t, n) in &o.df {
            *self.df.entry(t.clone()).or_default() += n;
        }
    }
}

/// A query bound to its corpus: terms (deduplicated, in query order)
/// with their idf.
#[derive(Debug, Clone)]
pub struct Query {
    pub terms: Vec<String>,
    pub op: MatchOp,
    /// How each term takes part (as `terms`).
    pub occur: Vec<Occur>,
    pub idf: Vec<f32>,
    pub avgdl: f32,
    /// Phrase queries: each query token's term and its position relative
    /// to the first token (stop words removed from the phrase still
    /// count, as in the documents' positions).
    pub phrase: Vec<(usize, u32)>,
    /// Phrase queries: other tokens allowed between consecutive query
    /// tokens (`"a b"~2`).
    pub slop: u32,
    /// Fuzzy terms (`word~`, `word~N`), not yet expanded: each stands for
    /// the vocabulary's terms within its edit distance (see
    /// [`Query::expand`]).
    pub fuzzy: Vec<Fuzzy>,
    /// Nested boolean queries (phrases or parenthesized groups as
    /// clauses, fuzzy terms that must or must not be there): the clauses,
    /// evaluated row by row. `None` for the flat queries above, which
    /// `terms` and `occur` describe alone. With a tree, every term is
    /// `Should` in `occur` (it only names the terms whose statistics and
    /// postings are needed).
    pub tree: Option<Vec<(Occur, Clause)>>,
}

/// Whether a row whose term `i` is at positions `pos[i]` (ascending)
/// holds `phrase` (see [`Query::phrase_at`]).
pub(super) fn phrase_holds(phrase: &[(usize, u32)], slop: u32, pos: &[&[u32]]) -> bool {
    fn chain(phrase: &[(usize, u32)], pos: &[&[u32]], j: usize, prev: u32, slop: u32) -> bool {
        let Some(&(t, off)) = phrase.get(j) else {
            return true;
        };
        let lo = prev.saturating_add(off - phrase[j - 1].1);
        let hi = lo.saturating_add(slop);
        let p = pos[t];
        p[p.partition_point(|x| *x < lo)..]
            .iter()
            .take_while(|x| **x <= hi)
            .any(|&x| chain(phrase, pos, j + 1, x, slop))
    }
    let Some(&(t0, _)) = phrase.first() else {
        return true;
    };
    pos[t0].iter().any(|&s| chain(phrase, pos, 1, s, slop))
}

/// Terms a fuzzy term expands to at most, the first in byte order (as
/// Lance's `max_expansions` default).
pub const MAX_EXPANSIONS: usize = 50;

/// A fuzzy query term: an analyzed token and the edit distance
/// (Levenshtein, in characters) within which vocabulary terms match it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fuzzy {
    pub token: String,
    pub distance: u32,
}

impl Fuzzy {
    /// Lance's automatic fuzziness: 0 for tokens of up to 2 bytes, 1 up
    /// to 5, else 2.
    pub fn auto(token: &str) -> u32 {
        match token.len() {
            0..=2 => 0,
            3..=5 => 1,
            _ => 2,
        }
    }

    /// The automaton accepting the terms within the distance.
    pub fn automaton(&self) -> Result<fst::automaton::Levenshtein> {
        fst::automaton::Levenshtein::new(&self.token, self.distance).map_err(|e| {
            crate::error::Error::InvalidInput(format!(
                "fuzzy term '{}~{}': {e}",
                self.token, self.distance
            ))
        })
    }
}

/// Whether `term` is accepted by automaton `a`.
pub fn accepts(a: &fst::automaton::Levenshtein, term: &str) -> bool {
    use fst::Automaton;
    let mut s = a.start();
    for b in term.bytes() {
        if !a.can_match(&s) {
            return false;
        }
        s = a.accept(&s, b);
    }
    a.is_match(&s)
}

/// A clause's fuzzy marker: `word~` (automatic distance) or `word~N`.
pub(super) fn split_fuzzy(clause: &str) -> Result<(&str, Option<Option<u32>>)> {
    let Some((word, n)) = clause.rsplit_once('~') else {
        return Ok((clause, None));
    };
    if n.is_empty() {
        return Ok((word, Some(None)));
    }
    match n.parse::<u32>() {
        Ok(d) if d <= 2 => Ok((word, Some(Some(d)))),
        _ => Err(crate::error::Error::InvalidInput(format!(
            "fuzzy term '{clause}': the edit distance after '~' is 0, 1 or 2"
        ))),
    }
}

/// A phrase query's text and slop: `"a b"~N` is the phrase `"a b"` with
/// slop N (Lucene's syntax); any other text has slop 0.
pub fn split_slop(text: &str) -> Result<(&str, u32)> {
    let t = text.trim_end();
    if let Some(i) = t.rfind("\"~") {
        let n = &t[i + 2..];
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            let slop = n.parse::<u32>().map_err(|_| {
                crate::error::Error::InvalidInput(format!(
                    "full-text query '{text}': slop {n} is too large"
                ))
            })?;
            return Ok((&t[..i + 1], slop));
        }
    }
    Ok((text, 0))
}

/// How a term takes part in a query, as a boolean query's clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occur {
    /// A matching row holds it (`+word`, or any word under `AND`).
    Must,
    /// Adds to the score; a row with no `Must` term matches when it holds
    /// some `Should` term (a plain word under `OR`).
    Should,
    /// A matching row does not hold it (`-word`); never scored.
    MustNot,
}

impl Query {
    /// Analyzes a query string under `op`, with zero statistics (bind them
    /// with [`Query::bind`]). Outside phrase queries, a word written
    /// `+word` must be in a matching row and `-word` must not (as in
    /// Lucene's and tantivy's query syntax); other words must be there
    /// under `AND` and add to the score under `OR`. A word written
    /// `word~` or `word~N` (N 0, 1 or 2) is a fuzzy term, left in
    /// [`Query::fuzzy`] for [`Query::expand`]; it may only be optional. A
    /// phrase query is the whole string, analyzed as one.
    pub fn parse(analyzer: &Analyzer, text: &str, op: MatchOp) -> Result<Query> {
        let mut terms: Vec<String> = Vec::new();
        let mut occur: Vec<Occur> = Vec::new();
        let mut phrase = vec![];
        let mut slop = 0;
        let mut fuzzy = vec![];
        if op != MatchOp::Phrase && text.contains(['"', '(', ')']) {
            return Query::parse_nested(analyzer, text, op);
        }
        if op == MatchOp::Phrase {
            let (text, n) = split_slop(text)?;
            slop = n;
            terms = Query::terms(analyzer, text);
            occur = vec![Occur::Must; terms.len()];
            phrase = Query::phrase_of(analyzer, text, &terms);
        } else {
            let plain = if op == MatchOp::And {
                Occur::Must
            } else {
                Occur::Should
            };
            for clause in text.split_whitespace() {
                let (o, word) = match clause.as_bytes()[0] {
                    b'+' => (Occur::Must, &clause[1..]),
                    b'-' => (Occur::MustNot, &clause[1..]),
                    _ => (plain, clause),
                };
                let (word, fuzzy_at) = split_fuzzy(word)?;
                if word.is_empty() {
                    return Err(crate::error::Error::InvalidInput(format!(
                        "full-text query '{text}': '{clause}' must be followed by a word"
                    )));
                }
                if let Some(d) = fuzzy_at {
                    // A fuzzy term is a set of optional terms here; one
                    // that must (or must not) be there is a clause of its
                    // own, as in a nested query.
                    if o != Occur::Should {
                        return Query::parse_nested(analyzer, text, op);
                    }
                    for t in analyzer.tokens(word) {
                        let f = Fuzzy {
                            distance: d.unwrap_or_else(|| Fuzzy::auto(&t)),
                            token: t,
                        };
                        f.automaton()?;
                        if !fuzzy.contains(&f) {
                            fuzzy.push(f);
                        }
                    }
                    continue;
                }
                for t in analyzer.tokens(word) {
                    match terms.iter().position(|x| *x == t) {
                        None => {
                            terms.push(t);
                            occur.push(o);
                        }
                        Some(i) => {
                            let (a, b) = (occur[i], o);
                            if a != b && (a == Occur::MustNot || b == Occur::MustNot) {
                                return Err(crate::error::Error::InvalidInput(format!(
                                    "full-text query '{text}': '{t}' is both required or \
                                     wanted and excluded (-)"
                                )));
                            }
                            if b == Occur::Must {
                                occur[i] = Occur::Must;
                            }
                        }
                    }
                }
            }
        }
        Ok(Query {
            idf: vec![0.0; terms.len()],
            terms,
            op,
            occur,
            avgdl: 0.0,
            phrase,
            slop,
            fuzzy,
            tree: None,
        })
    }

    /// Whether matching needs the terms' positions (a phrase query, or a
    /// phrase among a nested query's clauses).
    pub fn needs_positions(&self) -> bool {
        match &self.tree {
            Some(t) => t.iter().any(|(_, c)| c.has_phrase()),
            None => self.op == MatchOp::Phrase,
        }
    }

    /// Per term, whether it can make a row match (it is not only
    /// excluded): the terms whose postings are candidates.
    pub fn positive_terms(&self) -> Vec<bool> {
        match &self.tree {
            Some(t) => {
                let mut out = vec![false; self.terms.len()];
                mark_positive(t, &mut out);
                out
            }
            None => self.occur.iter().map(|o| *o != Occur::MustNot).collect(),
        }
    }

    /// Score of a row from the frequency and positions of each term (in
    /// `terms` order); `None` when it does not match.
    pub fn score_at(&self, tf: &[u32], len: u32, pos: &[&[u32]]) -> Option<f32> {
        match &self.tree {
            Some(t) => self.eval(t, tf, len, Some(pos)),
            None => {
                if self.op == MatchOp::Phrase && !self.phrase_at(pos) {
                    return None;
                }
                self.score(tf, len)
            }
        }
    }

    /// Whether `text` matches the query (before or after binding: the
    /// statistics change scores, not matches).
    pub fn matches_text(&self, analyzer: &Analyzer, text: &str) -> bool {
        if !self.can_match() {
            return false;
        }
        if self.needs_positions() {
            let (tf, len, pos) = self.row_positions(analyzer, text);
            let refs: Vec<&[u32]> = pos.iter().map(|p| p.as_slice()).collect();
            self.score_at(&tf, len, &refs).is_some()
        } else {
            let (tf, len) = self.row(analyzer, text);
            self.score(&tf, len).is_some()
        }
    }

    /// Replaces the fuzzy terms by `expansions` (per fuzzy term, the
    /// vocabulary terms it matches), each an optional term; a term the
    /// query already has keeps its part.
    pub fn expand(&mut self, expansions: Vec<Vec<String>>) {
        if let Some(tree) = self.tree.take() {
            self.expand_nested(tree, expansions);
            return;
        }
        self.fuzzy.clear();
        for t in expansions.into_iter().flatten() {
            if !self.terms.contains(&t) {
                self.terms.push(t);
                self.occur.push(Occur::Should);
                self.idf.push(0.0);
            }
        }
    }

    /// Sets the corpus statistics.
    pub fn bind(&mut self, corpus: &Corpus) {
        self.idf = self.terms.iter().map(|t| corpus.idf(t)).collect();
        self.avgdl = corpus.avgdl();
    }

    /// Whether some term can make a row match (a query of excluded terms
    /// only, or of stop words only, matches nothing).
    pub fn can_match(&self) -> bool {
        if let Some(t) = &self.tree {
            return t.iter().any(|(o, _)| *o != Occur::MustNot);
        }
        self.occur.iter().any(|o| *o != Occur::MustNot)
    }

    /// Analyzes `text` into deduplicated terms.
    pub fn terms(analyzer: &Analyzer, text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in analyzer.tokens(text) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }

    /// A query of `terms` combined by `op` (no `+`/`-` clauses), bound to
    /// `corpus`.
    pub fn new(terms: Vec<String>, op: MatchOp, corpus: &Corpus) -> Query {
        let o = if op.all_terms() {
            Occur::Must
        } else {
            Occur::Should
        };
        let mut q = Query {
            occur: vec![o; terms.len()],
            idf: vec![],
            terms,
            op,
            avgdl: 0.0,
            phrase: vec![],
            slop: 0,
            fuzzy: vec![],
            tree: None,
        };
        q.bind(corpus);
        q
    }

    /// The phrase layout of `text` over `terms` (see [`Query::phrase`]).
    pub fn phrase_of(analyzer: &Analyzer, text: &str, terms: &[String]) -> Vec<(usize, u32)> {
        let mut out = vec![];
        let mut first = None;
        analyzer.analyze(text, |t, pos| {
            let p0 = *first.get_or_insert(pos);
            if let Some(i) = terms.iter().position(|q| q == t) {
                out.push((i, pos - p0));
            }
        });
        out
    }

    /// Whether a row whose term `i` is at positions `pos[i]` (ascending)
    /// holds the phrase: each query token after the first at its offset
    /// from the previous one, or up to `slop` positions further (order
    /// kept, as Lance's `PhraseQuery` slop).
    pub fn phrase_at(&self, pos: &[&[u32]]) -> bool {
        phrase_holds(&self.phrase, self.slop, pos)
    }

    /// Frequencies, length and positions of the terms in `text`.
    pub fn row_positions(&self, analyzer: &Analyzer, text: &str) -> (Vec<u32>, u32, Vec<Vec<u32>>) {
        let mut pos = vec![Vec::new(); self.terms.len()];
        let mut len = 0u32;
        analyzer.analyze(text, |t, p| {
            len += 1;
            if let Some(i) = self.terms.iter().position(|q| q == t) {
                pos[i].push(p);
            }
        });
        let tf = pos.iter().map(|p| p.len() as u32).collect();
        (tf, len, pos)
    }

    /// Score of a row from the frequency of each term (in `terms` order).
    pub fn score(&self, tf: &[u32], len: u32) -> Option<f32> {
        if let Some(t) = &self.tree {
            return self.eval(t, tf, len, None);
        }
        let mut wanted = false;
        let mut s = 0f32;
        for (i, f) in tf.iter().enumerate() {
            match (self.occur[i], *f > 0) {
                (Occur::Must, false) | (Occur::MustNot, true) => return None,
                (Occur::MustNot, false) | (Occur::Should, false) => {}
                (Occur::Must | Occur::Should, true) => {
                    wanted = true;
                    s += posting::bm25(self.idf[i], *f, len, self.avgdl);
                }
            }
        }
        wanted.then_some(s)
    }

    /// BM25 of a row of length `len` holding each term `tf[i]` times,
    /// summed in term order.
    pub fn bm25_sum(&self, tf: &[u32], len: u32) -> f32 {
        let mut s = 0f32;
        for (i, f) in tf.iter().enumerate() {
            if *f > 0 {
                s += posting::bm25(self.idf[i], *f, len, self.avgdl);
            }
        }
        s
    }

    /// Frequencies of the terms in `text` and its length in tokens.
    pub fn row(&self, analyzer: &Analyzer, text: &str) -> (Vec<u32>, u32) {
        let mut tf = vec![0u32; self.terms.len()];
        let mut len = 0u32;
        analyzer.analyze(text, |t, _| {
            len += 1;
            if let Some(i) = self.terms.iter().position(|q| q == t) {
                tf[i] += 1;
            }
        });
        (tf, len)
    }
}

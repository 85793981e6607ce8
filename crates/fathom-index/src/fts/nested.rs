//! Nested boolean full-text queries: phrases and parenthesized groups as
//! clauses, `+`/`-` at any level, fuzzy terms that must or must not be
//! there. The clause tree ([`Clause`]), its parser, its evaluation on a
//! row, the roles its terms take in driving an index search, and that
//! search's clause evaluation ([`TreeEval`]) and exhaustive fallback
//! ([`nested`]).

use super::analyzer::Analyzer;
use super::cursor::{Cursor, END};
use super::posting;
use super::query::{Fuzzy, MatchOp, Occur, Query, phrase_holds, split_fuzzy};
use super::search::{Scored, SearchStats, TopK};
use super::segment::Partition;
use crate::error::Result;

/// A clause of a nested boolean query ([`Query::tree`]). A row matches a
/// list of clauses when it matches every `Must` clause, no `MustNot`
/// clause, and, when there is no `Must` clause, some `Should` clause; its
/// score is the sum of the scores of the `Must` and `Should` clauses it
/// matches (as Lucene's boolean query).
#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    /// Query term `i`: matched when the row holds it, scored by its BM25.
    Term(usize),
    /// An expanded fuzzy term: matched when the row holds any of these
    /// terms, scored by the sum of those it holds.
    AnyOf(Vec<usize>),
    /// Fuzzy term `j` of [`Query::fuzzy`], before [`Query::expand`]
    /// (matches nothing).
    Fuzzy(usize),
    /// A phrase: each query token's term and offset (as
    /// [`Query::phrase`]) and the slop; matched when the row holds the
    /// phrase, scored by the sum of its distinct terms.
    Phrase {
        phrase: Vec<(usize, u32)>,
        slop: u32,
    },
    /// A parenthesized group of clauses.
    Group(Vec<(Occur, Clause)>),
}

impl Clause {
    /// Whether a phrase is among this clause's parts.
    pub(super) fn has_phrase(&self) -> bool {
        match self {
            Clause::Phrase { .. } => true,
            Clause::Group(g) => g.iter().any(|(_, c)| c.has_phrase()),
            _ => false,
        }
    }

    /// Marks in `out` the terms that can make a row match (reached
    /// through `Must` and `Should` clauses only).
    fn mark_positive(&self, out: &mut [bool]) {
        match self {
            Clause::Term(i) => out[*i] = true,
            Clause::AnyOf(v) => v.iter().for_each(|i| out[*i] = true),
            Clause::Fuzzy(_) => {}
            Clause::Phrase { phrase, .. } => phrase.iter().for_each(|(i, _)| out[*i] = true),
            Clause::Group(g) => mark_positive(g, out),
        }
    }
}

/// Marks in `out` the terms every row matching `clauses` holds (those of
/// required words and phrases, and of required groups' own required
/// clauses).
fn mark_required(clauses: &[(Occur, Clause)], out: &mut [bool]) {
    for (o, c) in clauses {
        if *o != Occur::Must {
            continue;
        }
        match c {
            Clause::Term(i) => out[*i] = true,
            Clause::Phrase { phrase, .. } => phrase.iter().for_each(|(i, _)| out[*i] = true),
            Clause::Group(g) => mark_required(g, out),
            Clause::AnyOf(_) | Clause::Fuzzy(_) => {}
        }
    }
}

/// Counts in `out`, per term, the scored places it has (a phrase's
/// distinct terms once each).
fn count_scored(clauses: &[(Occur, Clause)], out: &mut [u32]) {
    for (o, c) in clauses {
        if *o == Occur::MustNot {
            continue;
        }
        match c {
            Clause::Term(i) => out[*i] += 1,
            Clause::AnyOf(v) => v.iter().for_each(|i| out[*i] += 1),
            Clause::Phrase { phrase, .. } => {
                let mut seen: Vec<usize> = phrase.iter().map(|(i, _)| *i).collect();
                seen.sort_unstable();
                seen.dedup();
                seen.into_iter().for_each(|i| out[i] += 1);
            }
            Clause::Group(g) => count_scored(g, out),
            Clause::Fuzzy(_) => {}
        }
    }
}

pub(super) fn mark_positive(clauses: &[(Occur, Clause)], out: &mut [bool]) {
    for (o, c) in clauses {
        if *o != Occur::MustNot {
            c.mark_positive(out);
        }
    }
}

impl Query {
    /// A nested boolean query (see [`Query::tree`]): clauses are words
    /// (`+word`, `-word`, `word~N` as in flat queries), phrases
    /// (`"a b"`, `+"a b"~2`) and parenthesized groups (`-(a b)`), combined
    /// at every level as the top level: a plain clause must be there
    /// under `AND` and is optional under `OR`.
    pub(super) fn parse_nested(analyzer: &Analyzer, text: &str, op: MatchOp) -> Result<Query> {
        let plain = if op == MatchOp::And {
            Occur::Must
        } else {
            Occur::Should
        };
        let mut b = TreeBuilder {
            analyzer,
            text,
            terms: vec![],
            fuzzy: vec![],
        };
        let mut at = 0;
        let clauses = b.clauses(&mut at, plain, 0)?;
        let n = b.terms.len();
        Ok(Query {
            idf: vec![0.0; n],
            occur: vec![Occur::Should; n],
            terms: b.terms,
            op,
            avgdl: 0.0,
            phrase: vec![],
            slop: 0,
            fuzzy: b.fuzzy,
            tree: Some(clauses),
        })
    }

    /// How a nested query's terms drive a search: per term, `Must` when
    /// every match holds it, `Should` when it can make a row match,
    /// `MustNot` otherwise (read only to evaluate the clauses). `None`
    /// for a flat query, or when a term is scored in more than one place
    /// (then the sum of the terms' scores does not bound a row's score).
    pub fn nested_roles(&self) -> Option<Vec<Occur>> {
        let t = self.tree.as_ref()?;
        let mut times = vec![0u32; self.terms.len()];
        count_scored(t, &mut times);
        if times.iter().any(|n| *n > 1) {
            return None;
        }
        let mut required = vec![false; self.terms.len()];
        mark_required(t, &mut required);
        let positive = self.positive_terms();
        Some(
            (0..self.terms.len())
                .map(|i| match (required[i], positive[i]) {
                    (true, _) => Occur::Must,
                    (false, true) => Occur::Should,
                    (false, false) => Occur::MustNot,
                })
                .collect(),
        )
    }

    /// A nested query's clauses evaluated on a row (`pos` is needed for
    /// phrases: without it a phrase clause matches nothing).
    pub(super) fn eval(
        &self,
        clauses: &[(Occur, Clause)],
        tf: &[u32],
        len: u32,
        pos: Option<&[&[u32]]>,
    ) -> Option<f32> {
        let mut wanted = false;
        let mut s = 0f32;
        for (o, c) in clauses {
            let r = self.eval_clause(c, tf, len, pos);
            match (o, r) {
                (Occur::Must, None) | (Occur::MustNot, Some(_)) => return None,
                (Occur::MustNot, None) | (Occur::Should, None) => {}
                (Occur::Must | Occur::Should, Some(x)) => {
                    wanted = true;
                    s += x;
                }
            }
        }
        wanted.then_some(s)
    }

    fn eval_clause(&self, c: &Clause, tf: &[u32], len: u32, pos: Option<&[&[u32]]>) -> Option<f32> {
        let bm25 = |i: usize| posting::bm25(self.idf[i], tf[i], len, self.avgdl);
        match c {
            Clause::Term(i) => (tf[*i] > 0).then(|| bm25(*i)),
            Clause::AnyOf(v) => {
                let held: Vec<usize> = v.iter().copied().filter(|i| tf[*i] > 0).collect();
                (!held.is_empty()).then(|| held.into_iter().map(bm25).sum())
            }
            Clause::Fuzzy(_) => None,
            Clause::Phrase { phrase, slop } => {
                let pos = pos?;
                if phrase.iter().any(|(i, _)| tf[*i] == 0) || !phrase_holds(phrase, *slop, pos) {
                    return None;
                }
                let mut seen: Vec<usize> = phrase.iter().map(|(i, _)| *i).collect();
                seen.sort_unstable();
                seen.dedup();
                Some(seen.into_iter().map(bm25).sum())
            }
            Clause::Group(g) => self.eval(g, tf, len, pos),
        }
    }

    /// A nested query's fuzzy clauses replaced by any-of clauses of
    /// their `expansions` (see [`Query::expand`]).
    pub(super) fn expand_nested(
        &mut self,
        tree: Vec<(Occur, Clause)>,
        expansions: Vec<Vec<String>>,
    ) {
        let mut idx = Vec::with_capacity(expansions.len());
        for ts in expansions {
            let mut v = Vec::with_capacity(ts.len());
            for t in ts {
                let i = match self.terms.iter().position(|x| *x == t) {
                    Some(i) => i,
                    None => {
                        self.terms.push(t);
                        self.occur.push(Occur::Should);
                        self.idf.push(0.0);
                        self.terms.len() - 1
                    }
                };
                v.push(i);
            }
            idx.push(v);
        }
        fn replace(clauses: Vec<(Occur, Clause)>, idx: &[Vec<usize>]) -> Vec<(Occur, Clause)> {
            clauses
                .into_iter()
                .map(|(o, c)| {
                    let c = match c {
                        Clause::Fuzzy(j) => Clause::AnyOf(idx.get(j).cloned().unwrap_or_default()),
                        Clause::Group(g) => Clause::Group(replace(g, idx)),
                        c => c,
                    };
                    (o, c)
                })
                .collect()
        }
        self.tree = Some(replace(tree, &idx));
        self.fuzzy.clear();
    }
}

/// Parses a nested query's clauses (see [`Query::parse_nested`]),
/// gathering its terms and fuzzy terms.
struct TreeBuilder<'a> {
    analyzer: &'a Analyzer,
    text: &'a str,
    terms: Vec<String>,
    fuzzy: Vec<Fuzzy>,
}

impl TreeBuilder<'_> {
    fn err(&self, what: impl std::fmt::Display) -> crate::error::Error {
        crate::error::Error::InvalidInput(format!("full-text query '{}': {what}", self.text))
    }

    fn term(&mut self, t: String) -> usize {
        match self.terms.iter().position(|x| *x == t) {
            Some(i) => i,
            None => {
                self.terms.push(t);
                self.terms.len() - 1
            }
        }
    }

    /// Adds term `i` to a level's clauses; a term already there keeps one
    /// clause (required if either is), as in flat queries.
    fn push_term(&self, out: &mut Vec<(Occur, Clause)>, o: Occur, i: usize) -> Result<()> {
        if let Some((a, _)) = out.iter_mut().find(|(_, c)| *c == Clause::Term(i)) {
            if *a != o && (*a == Occur::MustNot || o == Occur::MustNot) {
                return Err(self.err(format!(
                    "'{}' is both required or wanted and excluded (-)",
                    self.terms[i]
                )));
            }
            if o == Occur::Must {
                *a = Occur::Must;
            }
            return Ok(());
        }
        out.push((o, Clause::Term(i)));
        Ok(())
    }

    /// The clauses from `*at` to the end of the text (`depth` 0) or to
    /// the `)` closing this group.
    fn clauses(
        &mut self,
        at: &mut usize,
        plain: Occur,
        depth: usize,
    ) -> Result<Vec<(Occur, Clause)>> {
        let s = self.text;
        let mut out: Vec<(Occur, Clause)> = vec![];
        let ends_word = |c: char| c.is_whitespace() || matches!(c, '(' | ')' | '"');
        loop {
            *at += s[*at..].len() - s[*at..].trim_start().len();
            let Some(c) = s[*at..].chars().next() else {
                if depth > 0 {
                    return Err(self.err("'(' without a closing ')'"));
                }
                return Ok(out);
            };
            if c == ')' {
                if depth == 0 {
                    return Err(self.err("')' without an opening '('"));
                }
                *at += 1;
                return Ok(out);
            }
            let start = *at;
            let o = match c {
                '+' => Occur::Must,
                '-' => Occur::MustNot,
                _ => plain,
            };
            if matches!(c, '+' | '-') {
                *at += 1;
            }
            match s[*at..].chars().next() {
                Some('(') => {
                    *at += 1;
                    let g = self.clauses(at, plain, depth + 1)?;
                    if !g.is_empty() {
                        out.push((o, Clause::Group(g)));
                    }
                }
                Some('"') => {
                    let close = s[*at + 1..]
                        .find('"')
                        .ok_or_else(|| self.err("unbalanced double quote"))?
                        + *at
                        + 1;
                    let inner = &s[*at + 1..close];
                    *at = close + 1;
                    let mut slop = 0;
                    if s[*at..].starts_with('~') {
                        let digits = s[*at + 1..]
                            .find(|c: char| !c.is_ascii_digit())
                            .map_or(s.len() - *at - 1, |e| e);
                        let n = &s[*at + 1..*at + 1 + digits];
                        slop = n.parse::<u32>().map_err(|_| {
                            self.err(format!("'~' after a phrase takes a slop, got '{n}'"))
                        })?;
                        *at += 1 + digits;
                    }
                    let local = Query::terms(self.analyzer, inner);
                    if !local.is_empty() {
                        let phrase = Query::phrase_of(self.analyzer, inner, &local)
                            .into_iter()
                            .map(|(i, off)| (self.term(local[i].clone()), off))
                            .collect();
                        out.push((o, Clause::Phrase { phrase, slop }));
                    }
                }
                Some(c) if !ends_word(c) => {
                    let end = s[*at..].find(ends_word).map_or(s.len(), |e| *at + e);
                    let clause = &s[start..end];
                    let (word, fuzzy_at) = split_fuzzy(&s[*at..end])?;
                    *at = end;
                    if word.is_empty() {
                        return Err(self.err(format!("'{clause}' must be followed by a word")));
                    }
                    for t in self.analyzer.tokens(word) {
                        match fuzzy_at {
                            Some(d) => {
                                let f = Fuzzy {
                                    distance: d.unwrap_or_else(|| Fuzzy::auto(&t)),
                                    token: t,
                                };
                                f.automaton()?;
                                let j = match self.fuzzy.iter().position(|x| *x == f) {
                                    Some(j) => j,
                                    None => {
                                        self.fuzzy.push(f);
                                        self.fuzzy.len() - 1
                                    }
                                };
                                out.push((o, Clause::Fuzzy(j)));
                            }
                            None => {
                                let i = self.term(t);
                                self.push_term(&mut out, o, i)?;
                            }
                        }
                    }
                }
                _ => {
                    return Err(self.err(format!(
                        "'{}' must be followed by a word, a phrase or a group",
                        &s[start..*at]
                    )));
                }
            }
        }
    }
}

/// Evaluates a nested query's clauses on a row the flat search found:
/// the frequencies (and positions) of the terms at the row, from the
/// cursors holding it and the cursors of the terms only read for this.
pub(super) struct TreeEval {
    pub(super) side: Vec<Cursor>,
    pub(super) tf: Vec<u32>,
    pub(super) pos: Vec<Vec<u32>>,
    pub(super) with_pos: bool,
}

impl TreeEval {
    /// The row's score, `None` when it does not match; `placed` are the
    /// search's cursors holding document `d`, each with its place in its
    /// decoded block.
    pub(super) fn eval<'a>(
        &mut self,
        part: &Partition,
        q: &Query,
        d: u32,
        placed: impl Iterator<Item = (&'a mut Cursor, usize)>,
        stats: &mut SearchStats,
    ) -> Result<Option<f32>> {
        self.tf.fill(0);
        let (tf, pos, with_pos) = (&mut self.tf, &mut self.pos, self.with_pos);
        let mut take = |c: &mut Cursor, p: usize, stats: &mut SearchStats| -> Result<()> {
            c.ensure(stats)?;
            tf[c.term] = c.freqs[p];
            if with_pos {
                c.load_positions(stats)?;
                pos[c.term].clear();
                pos[c.term].extend_from_slice(c.positions_at(p));
            }
            Ok(())
        };
        for (c, p) in placed {
            take(c, p, stats)?;
        }
        for c in self.side.iter_mut() {
            c.seek(d, stats)?;
            if c.doc == d {
                let p = c.pos;
                take(c, p, stats)?;
            }
        }
        let refs: Vec<&[u32]> = self
            .pos
            .iter()
            .zip(&self.tf)
            .map(|(p, f)| if *f == 0 { &[][..] } else { p.as_slice() })
            .collect();
        Ok(q.score_at(&self.tf, part.lens[d as usize], &refs))
    }
}

/// A nested boolean query over one partition: every document holding a
/// term that can make a row match is a candidate, its terms' frequencies
/// (and positions, for phrases) gathered from the cursors and the query's
/// clauses evaluated on them. Exhaustive (no block-max skipping): the
/// clauses' bounds do not add up as a flat query's terms do.
pub(super) fn nested(
    part: &Partition,
    q: &Query,
    cursors: Vec<Cursor>,
    allow: &(dyn Fn(u64) -> bool + Sync),
    top: &mut TopK,
    stats: &mut SearchStats,
) -> Result<()> {
    let positive = q.positive_terms();
    let (mut lead, mut rest): (Vec<Cursor>, Vec<Cursor>) =
        cursors.into_iter().partition(|c| positive[c.term]);
    let with_pos = q.needs_positions();
    let mut tf = vec![0u32; q.terms.len()];
    let mut pos: Vec<Vec<u32>> = vec![vec![]; q.terms.len()];
    loop {
        let d = lead.iter().map(|c| c.doc).min().unwrap_or(END);
        if d == END {
            return Ok(());
        }
        tf.fill(0);
        for c in lead.iter_mut().chain(rest.iter_mut()) {
            c.seek(d, stats)?;
            if c.doc != d {
                continue;
            }
            tf[c.term] = c.tf(stats)?;
            if with_pos {
                c.load_positions(stats)?;
                pos[c.term].clear();
                pos[c.term].extend_from_slice(c.positions_at(c.pos));
            }
        }
        if with_pos {
            for (p, f) in pos.iter_mut().zip(&tf) {
                if *f == 0 {
                    p.clear();
                }
            }
        }
        stats.docs_scored += 1;
        let refs: Vec<&[u32]> = pos.iter().map(|p| p.as_slice()).collect();
        if let Some(s) = q.score_at(&tf, part.lens[d as usize], &refs) {
            let addr = part.rowaddrs[d as usize];
            if top.threshold().is_none_or(|t| s >= t) && allow(addr) {
                top.push(Scored { addr, score: s });
            }
        }
        for c in lead.iter_mut().filter(|c| c.doc == d) {
            c.next(stats)?;
        }
    }
}

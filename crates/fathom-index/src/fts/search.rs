//! BM25 search over a segment's partitions: OR queries by block-max WAND
//! (a document is scored only when the block-max scores of the blocks it
//! could be in can beat the current k-th score), AND queries by
//! leap-frogging intersection; boolean queries (`+must -not should`)
//! intersect the required terms, or WAND over the optional ones without
//! any, then skip rows holding an excluded term. Scores use the statistics of the whole
//! table version ([`Corpus`]), so they equal the flat path's for the same
//! row; the block-max scores stored under the partition's own statistics
//! are rescaled into safe upper bounds.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::analyzer::Analyzer;
use super::posting::{self, BLOCK};
use super::segment::{FtsSegment, Partition, PostingList};
use crate::cache::IndexCache;
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
fn split_fuzzy(clause: &str) -> Result<(&str, Option<Option<u32>>)> {
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
                    // A fuzzy term is a set of optional terms: it can take
                    // part only where any of them would do.
                    if o != Occur::Should {
                        return Err(crate::error::Error::InvalidInput(format!(
                            "full-text query '{text}': fuzzy term '{clause}' can only be an \
                             optional term of an OR query (not AND, +, or -)"
                        )));
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
        })
    }

    /// Replaces the fuzzy terms by `expansions` (per fuzzy term, the
    /// vocabulary terms it matches), each an optional term; a term the
    /// query already has keeps its part.
    pub fn expand(&mut self, expansions: Vec<Vec<String>>) {
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
        self.occur.iter().any(|o| *o != Occur::MustNot)
    }

    /// Whether a row must hold term `i`.
    fn required(&self, i: usize) -> bool {
        self.occur[i] == Occur::Must
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
        let Some(&(t0, _)) = self.phrase.first() else {
            return true;
        };
        pos[t0]
            .iter()
            .any(|&s| chain(&self.phrase, pos, 1, s, self.slop))
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

/// A scored row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub addr: u64,
    pub score: f32,
}

/// Ordered so that the heap's top is the worst kept row: lower score,
/// then higher address.
#[derive(Debug, Clone, Copy)]
struct Worst(Scored);

impl PartialEq for Worst {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Worst {
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.score
            .total_cmp(&self.0.score)
            .then(self.0.addr.cmp(&o.0.addr))
    }
}

/// The best `k` rows seen (all rows when `k` is `None`): highest score
/// first, ties by lower row address.
#[derive(Debug)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    pub fn new(k: Option<usize>) -> TopK {
        TopK {
            k: k.unwrap_or(usize::MAX),
            heap: BinaryHeap::new(),
        }
    }

    /// The score a row must reach to enter (`None` while not full).
    pub fn threshold(&self) -> Option<f32> {
        (self.heap.len() >= self.k).then(|| self.heap.peek().map_or(f32::MIN, |w| w.0.score))
    }

    pub fn push(&mut self, s: Scored) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Worst(s));
        } else if let Some(w) = self.heap.peek()
            && Worst(s) < *w
        {
            self.heap.pop();
            self.heap.push(Worst(s));
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Best first.
    pub fn into_sorted(self) -> Vec<Scored> {
        let mut v: Vec<Worst> = self.heap.into_vec();
        v.sort();
        v.into_iter().map(|w| w.0).collect()
    }
}

/// What a search did.
#[derive(Debug, Default, Clone, Copy)]
pub struct SearchStats {
    /// Postings whose document was scored.
    pub docs_scored: usize,
    /// Posting blocks decoded.
    pub blocks_decoded: usize,
    /// Blocks in the query terms' posting lists.
    pub blocks_total: usize,
}

struct Cursor {
    list: Arc<PostingList>,
    term: usize,
    /// Upper bound of this term's score in any document.
    ub: f32,
    /// Multiplier turning a stored block-max score into an upper bound.
    scale: f32,
    block: usize,
    decoded: Option<usize>,
    docs: Vec<u32>,
    freqs: Vec<u32>,
    pos: usize,
    doc: u32,
    /// Positions of the decoded block's documents (phrase queries).
    positions: BlockPositions,
}

/// A block's positions, flat: document `i`'s are
/// `flat[starts[i]..starts[i + 1]]`.
#[derive(Default)]
struct BlockPositions {
    block: Option<usize>,
    flat: Vec<u32>,
    starts: Vec<u32>,
}

const END: u32 = u32::MAX;

impl Cursor {
    fn ensure(&mut self, stats: &mut SearchStats) -> Result<()> {
        if self.decoded != Some(self.block) {
            self.list
                .decode(self.block, &mut self.docs, &mut self.freqs)?;
            self.decoded = Some(self.block);
            stats.blocks_decoded += 1;
        }
        Ok(())
    }

    fn enter_block(&mut self, b: usize) {
        self.block = b;
        self.pos = 0;
        self.doc = self.list.first_docs.get(b).copied().unwrap_or(END);
    }

    fn tf(&mut self, stats: &mut SearchStats) -> Result<u32> {
        self.ensure(stats)?;
        Ok(self.freqs[self.pos])
    }

    /// Positions of the current document.
    /// Decodes the current block's positions (once per block).
    fn load_positions(&mut self, stats: &mut SearchStats) -> Result<()> {
        self.ensure(stats)?;
        if self.positions.block != Some(self.block) {
            let p = &mut self.positions;
            self.list
                .block_positions(self.block, &self.freqs, &mut p.flat)?;
            p.starts.clear();
            let mut at = 0u32;
            for f in &self.freqs {
                p.starts.push(at);
                at += f;
            }
            p.starts.push(at);
            p.block = Some(self.block);
        }
        Ok(())
    }

    /// Positions of the document at place `pos` of the current block
    /// (after `load_positions`).
    fn positions_at(&self, pos: usize) -> &[u32] {
        let p = &self.positions;
        match (p.starts.get(pos), p.starts.get(pos + 1)) {
            (Some(a), Some(b)) => &p.flat[*a as usize..*b as usize],
            _ => &[],
        }
    }

    fn next(&mut self, stats: &mut SearchStats) -> Result<()> {
        self.ensure(stats)?;
        self.pos += 1;
        if self.pos >= self.docs.len() {
            self.enter_block(self.block + 1);
        } else {
            self.doc = self.docs[self.pos];
        }
        Ok(())
    }

    /// Moves to the first doc at or after `target`.
    fn seek(&mut self, target: u32, stats: &mut SearchStats) -> Result<()> {
        if self.doc >= target {
            return Ok(());
        }
        let b = self.containing(target);
        if b != self.block {
            self.enter_block(b);
            if self.doc >= target {
                return Ok(());
            }
        }
        self.ensure(stats)?;
        // Targets are mostly a few documents on (dense lists): look at
        // the next ones before searching the rest of the block.
        let rest = &self.docs[self.pos..];
        let mut i = 0;
        while i < 8 && i < rest.len() && rest[i] < target {
            i += 1;
        }
        if i == 8 {
            i += rest[8..].partition_point(|d| *d < target);
        }
        let p = self.pos + i;
        if p >= self.docs.len() {
            self.enter_block(self.block + 1);
        } else {
            self.pos = p;
            self.doc = self.docs[p];
        }
        Ok(())
    }

    /// The block (from the current one on) that would hold `target`.
    fn containing(&self, target: u32) -> usize {
        let f = &self.list.first_docs;
        // Most lookups are for the current block.
        if f.get(self.block + 1).is_none_or(|next| target < *next) {
            return self.block;
        }
        // Then the next one (dense terms walk their blocks in order).
        if f.get(self.block + 2).is_none_or(|next| target < *next) {
            return self.block + 1;
        }
        let rest = &self.list.first_docs[self.block..];
        self.block + rest.partition_point(|f| *f <= target).saturating_sub(1)
    }

    /// Moves to the block (from the current one on) that may hold
    /// `target` without decoding it: afterwards `doc` is at or after
    /// `target`, or the block's documents run past `target` (`doc` then
    /// is a lower bound, not a document; [`Cursor::place`] finds it).
    fn seek_block(&mut self, target: u32) {
        if self.doc >= target {
            return;
        }
        let mut b = self.containing(target);
        if self.last_doc(b) < target {
            b += 1;
        }
        if b != self.block {
            self.enter_block(b);
        }
    }

    /// Moves to place `p` of the decoded current block (its end: the
    /// next block).
    fn move_to(&mut self, p: usize) {
        if p >= self.docs.len() {
            self.enter_block(self.block + 1);
        } else {
            self.pos = p;
            self.doc = self.docs[p];
        }
    }

    /// Decodes the current block and moves to its first document at or
    /// after `target` (within the block).
    fn place(&mut self, target: u32, stats: &mut SearchStats) -> Result<()> {
        self.ensure(stats)?;
        self.pos += self.docs[self.pos..].partition_point(|d| *d < target);
        Ok(())
    }

    /// The last document block `b` may hold.
    fn last_doc(&self, b: usize) -> u32 {
        self.list
            .first_docs
            .get(b + 1)
            .map_or(END, |f| f.saturating_sub(1))
    }

    /// Upper bound of this term's score in block `b`.
    fn bound_in(&self, b: usize) -> f32 {
        self.list.block_max[b] * self.scale
    }

    /// Upper bound of this term's score at `target` and the last doc of
    /// the block that would hold it.
    fn block_bound(&self, target: u32) -> (f32, u32) {
        let b = self.containing(target);
        (self.bound_in(b), self.last_doc(b))
    }
}

/// Slack on upper bounds for float rounding.
fn loosen(x: f32) -> f32 {
    x * (1.0 + 1e-4) + 1e-6
}

impl FtsSegment {
    /// Searches every partition, adding rows `allow` accepts to `top`.
    pub async fn search(
        &self,
        q: &Query,
        allow: &(dyn Fn(u64) -> bool + Sync),
        cache: &IndexCache,
        top: &mut TopK,
    ) -> Result<SearchStats> {
        let mut stats = SearchStats::default();
        if q.op == MatchOp::Phrase && !self.params.with_position {
            return Err(crate::error::Error::InvalidInput(format!(
                "a phrase query needs positions: inverted index segment {} was built without \
                 them (CREATE INDEX ... USING INVERTED (col) WITH (with_position = true))",
                self.uuid
            )));
        }
        let seg_docs: usize = self.parts.iter().map(|p| p.num_docs()).sum();
        let seg_tokens: u64 = self.parts.iter().map(|p| p.total_tokens).sum();
        for part in &self.parts {
            let mut lists = Vec::new();
            for (i, t) in q.terms.iter().enumerate() {
                if let Some(l) = part.posting(t, cache).await? {
                    lists.push((i, l));
                } else if q.required(i) {
                    lists.clear();
                    break;
                }
            }
            if !lists.iter().any(|(i, _)| q.occur[*i] != Occur::MustNot) {
                continue;
            }
            let part_tokens = part.total_tokens;
            let local_avgdl = |docs: usize, tokens: u64| {
                if docs == 0 {
                    f32::MAX
                } else {
                    tokens as f32 / docs as f32
                }
            };
            // The stored block maxes were scored with this partition's
            // statistics or the segment's: bound by the more generous.
            let a_local =
                local_avgdl(part.num_docs(), part_tokens).min(local_avgdl(seg_docs, seg_tokens));
            let a_ratio = (q.avgdl / a_local).max(1.0);
            let cursors: Vec<Cursor> = lists
                .into_iter()
                .map(|(i, list)| {
                    let idf_local = posting::idf(list.df as u64, part.num_docs() as u64)
                        .min(posting::idf(list.df as u64, seg_docs as u64));
                    let scale = loosen(q.idf[i] / idf_local.max(1e-9) * a_ratio);
                    stats.blocks_total += list.blocks.len();
                    let mut c = Cursor {
                        ub: list.max_score * scale,
                        list,
                        term: i,
                        scale,
                        block: 0,
                        decoded: None,
                        docs: Vec::with_capacity(BLOCK),
                        freqs: Vec::with_capacity(BLOCK),
                        pos: 0,
                        doc: 0,
                        positions: BlockPositions::default(),
                    };
                    c.enter_block(0);
                    c
                })
                .collect();
            let (mut must, mut should, mut not) = (vec![], vec![], vec![]);
            for c in cursors {
                match q.occur[c.term] {
                    Occur::Must => must.push(c),
                    Occur::Should => should.push(c),
                    Occur::MustNot => not.push(c),
                }
            }
            let mut extra = Extra {
                should,
                not,
                should_ub: 0.0,
            };
            extra.should_ub = extra.should.iter().map(|c| c.ub).sum();
            if must.is_empty() {
                wand(part, q, &mut extra, allow, top, &mut stats)?
            } else {
                intersect(part, q, &mut must, &mut extra, allow, top, &mut stats)?
            }
        }
        Ok(stats)
    }
}

fn score_at<'a>(
    part: &Partition,
    q: &Query,
    cursors: impl Iterator<Item = &'a mut Cursor>,
    d: u32,
    stats: &mut SearchStats,
) -> Result<f32> {
    let mut tf = [0u32; 16];
    let mut tfv;
    let tf: &mut [u32] = if q.terms.len() <= 16 {
        &mut tf[..q.terms.len()]
    } else {
        tfv = vec![0u32; q.terms.len()];
        &mut tfv
    };
    for c in cursors.filter(|c| c.doc == d) {
        tf[c.term] = c.tf(stats)?;
    }
    stats.docs_scored += 1;
    Ok(q.bm25_sum(tf, part.lens[d as usize]))
}

/// The cursors of a query's optional (`Should`) and excluded (`MustNot`)
/// terms, beside those that drive the search.
struct Extra {
    should: Vec<Cursor>,
    not: Vec<Cursor>,
    /// Upper bound of the optional terms' summed score.
    should_ub: f32,
}

impl Extra {
    /// Whether document `d` holds an excluded term.
    fn excluded(&mut self, d: u32, stats: &mut SearchStats) -> Result<bool> {
        for c in self.not.iter_mut() {
            c.seek(d, stats)?;
            if c.doc == d {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn wand(
    part: &Partition,
    q: &Query,
    extra: &mut Extra,
    allow: &(dyn Fn(u64) -> bool + Sync),
    top: &mut TopK,
    stats: &mut SearchStats,
) -> Result<()> {
    let mut cursors = std::mem::take(&mut extra.should);
    let cursors = &mut cursors;
    loop {
        cursors.retain(|c| c.doc != END);
        if cursors.is_empty() {
            return Ok(());
        }
        cursors.sort_by_key(|c| c.doc);
        let n = cursors.len();
        let theta = top.threshold();
        let mut acc = 0f32;
        let mut pivot = None;
        for (i, c) in cursors.iter().enumerate() {
            acc += c.ub;
            if theta.is_none_or(|t| acc >= t) {
                pivot = Some(i);
                break;
            }
        }
        let Some(mut p) = pivot else {
            return Ok(());
        };
        let pd = cursors[p].doc;
        while p + 1 < n && cursors[p + 1].doc == pd {
            p += 1;
        }
        if let Some(t) = theta {
            let (mut bound, mut end) = (0f32, END);
            for c in &cursors[..=p] {
                let (b, e) = c.block_bound(pd);
                bound += b;
                end = end.min(e);
            }
            if bound < t {
                // No doc up to the end of these blocks (and before the
                // next cursor) can reach the threshold.
                let mut target = end.saturating_add(1);
                if p + 1 < n {
                    target = target.min(cursors[p + 1].doc);
                }
                let target = target.max(pd + 1);
                for c in &mut cursors[..=p] {
                    c.seek(target, stats)?;
                }
                continue;
            }
        }
        if cursors[0].doc == pd {
            // Scoring is cheaper than asking whether the row is allowed:
            // score first, ask only a row that would enter.
            let s = score_at(part, q, cursors.iter_mut(), pd, stats)?;
            let addr = part.rowaddrs[pd as usize];
            if theta.is_none_or(|t| s >= t) && allow(addr) && !extra.excluded(pd, stats)? {
                top.push(Scored { addr, score: s });
            }
            for c in cursors.iter_mut().filter(|c| c.doc == pd) {
                c.next(stats)?;
            }
        } else {
            for c in cursors[..p].iter_mut() {
                c.seek(pd, stats)?;
            }
        }
    }
}

/// Whether the candidate the cursors hold at `at` (each cursor's place in
/// its decoded block, in cursor order) holds the phrase.
fn phrase_at_places(
    q: &Query,
    cursors: &mut [Cursor],
    at: impl Fn(usize) -> usize,
    stats: &mut SearchStats,
) -> Result<bool> {
    for c in cursors.iter_mut() {
        c.load_positions(stats)?;
    }
    let mut small: [&[u32]; 16] = [&[]; 16];
    let mut big;
    let refs: &mut [&[u32]] = if q.terms.len() <= 16 {
        &mut small[..q.terms.len()]
    } else {
        big = vec![&[][..]; q.terms.len()];
        &mut big
    };
    for (i, c) in cursors.iter().enumerate() {
        refs[c.term] = c.positions_at(at(i));
    }
    Ok(q.phrase_at(refs))
}

/// Documents every required term holds, found a window at a time: a
/// window ends where the first of the cursors' current blocks ends, so
/// each cursor's documents in it are one slice of its decoded block. The
/// window's block maxima are checked once; the candidates are the lead
/// (rarest) term's documents, narrowed by a merge with each other term's
/// slice; each is scored, and only one whose score could enter the top k
/// is asked whether it is allowed and (phrases) read for positions.
/// Frequencies below this have a score bound of their own in `intersect`.
const TF_BOUNDS: usize = 16;

fn intersect(
    part: &Partition,
    q: &Query,
    cursors: &mut [Cursor],
    extra: &mut Extra,
    allow: &(dyn Fn(u64) -> bool + Sync),
    top: &mut TopK,
    stats: &mut SearchStats,
) -> Result<()> {
    cursors.sort_by_key(|c| c.list.df);
    let n = cursors.len();
    // Candidate `j` is document `docs[j]`, at place `at[i][j]` of
    // cursor `i`'s decoded block.
    let mut docs: Vec<u32> = Vec::with_capacity(BLOCK);
    let mut at: Vec<Vec<u32>> = vec![Vec::with_capacity(BLOCK); n];
    let mut tf = vec![0u32; q.terms.len()];
    let mut next_at: Vec<Option<usize>> = vec![None; n];
    // Bounds of each required term's score by its frequency alone (at the
    // partition's shortest document): a candidate whose bound cannot
    // reach the k-th score is passed over without reading its length.
    let by_tf: Vec<[f32; TF_BOUNDS]> = cursors
        .iter()
        .map(|c| {
            std::array::from_fn(|f| {
                let f = (f as u32).max(1);
                loosen(posting::bm25(q.idf[c.term], f, part.min_len, q.avgdl)).min(c.ub)
            })
        })
        .collect();
    let mut d = cursors[0].doc;
    loop {
        // The window starts at the first document every cursor may hold:
        // the lead's next document, the others' blocks found without
        // decoding them (most windows end before they are needed).
        loop {
            let before = d;
            cursors[0].seek(d, stats)?;
            d = d.max(cursors[0].doc);
            for c in cursors[1..].iter_mut() {
                c.seek_block(d);
                d = d.max(c.doc);
            }
            if d == END {
                return Ok(());
            }
            if d == before {
                break;
            }
        }
        let mut end = END;
        for c in cursors.iter() {
            if c.doc == END {
                return Ok(());
            }
            end = end.min(c.last_doc(c.block));
        }
        // Block-max skipping: no document of the window can beat the
        // k-th score.
        if let Some(t) = top.threshold() {
            let bound: f32 =
                extra.should_ub + cursors.iter().map(|c| c.bound_in(c.block)).sum::<f32>();
            if loosen(bound) < t {
                if end == END {
                    return Ok(());
                }
                d = end + 1;
                continue;
            }
        }
        docs.clear();
        for a in at.iter_mut() {
            a.clear();
        }
        // Where each cursor goes after the window (set once its block is
        // read; applied after the candidates, which read the blocks).
        next_at.fill(None);
        {
            // The lead's documents in the window, less those whose
            // frequency alone (with every other term at its block maximum)
            // cannot reach the k-th score.
            let rest: f32 = extra.should_ub
                + cursors[1..]
                    .iter()
                    .map(|c| c.bound_in(c.block))
                    .sum::<f32>();
            let (lead, lead_tf) = (&mut cursors[0], &by_tf[0]);
            // The bounds grow with the frequency: the least one that may
            // reach the k-th score.
            let min_f = match top.threshold() {
                None => 0,
                Some(t) => (0..TF_BOUNDS)
                    .find(|&f| loosen(lead_tf[f] + rest) >= t)
                    .map_or_else(
                        || {
                            if loosen(lead.ub + rest) >= t {
                                TF_BOUNDS as u32
                            } else {
                                u32::MAX
                            }
                        },
                        |f| f as u32,
                    ),
            };
            lead.ensure(stats)?;
            let mut p = lead.pos;
            while p < lead.docs.len() {
                let doc = lead.docs[p];
                if doc > end {
                    break;
                }
                if lead.freqs[p] >= min_f {
                    docs.push(doc);
                    at[0].push(p as u32);
                }
                p += 1;
            }
            // The lead's next document is the first after the window.
            next_at[0] = Some(p);
        }
        for i in 1..n {
            if docs.is_empty() {
                break;
            }
            let c = &mut cursors[i];
            c.place(docs[0], stats)?;
            // A merge of two ascending lists without a branch to mispredict
            // per step (dense terms alternate unpredictably): every step
            // writes the pair in place and keeps it only when equal.
            let (cd, mut p) = (&c.docs, c.pos);
            let (lower, this) = at.split_at_mut(i);
            let this = &mut this[0];
            this.resize(docs.len(), 0);
            let (mut j, mut kept) = (0, 0);
            if docs.len() * 8 <= cd.len() - p {
                // Few candidates (the lead's were filtered by frequency):
                // each is searched for instead.
                while j < docs.len() && p < cd.len() {
                    let a = docs[j];
                    p += cd[p..].partition_point(|d| *d < a);
                    if p < cd.len() && cd[p] == a {
                        docs[kept] = a;
                        for l in lower.iter_mut() {
                            l[kept] = l[j];
                        }
                        this[kept] = p as u32;
                        kept += 1;
                    }
                    j += 1;
                }
            }
            while j < docs.len() && p < cd.len() {
                let (a, b) = (docs[j], cd[p]);
                docs[kept] = a;
                for l in lower.iter_mut() {
                    l[kept] = l[j];
                }
                this[kept] = p as u32;
                kept += usize::from(a == b);
                j += usize::from(a <= b);
                p += usize::from(b <= a);
            }
            // Nothing before `p` is at or after the next window.
            next_at[i] = Some(p);
            this.truncate(kept);
            docs.truncate(kept);
            for a in at[..i].iter_mut() {
                a.truncate(kept);
            }
        }
        for (j, &doc) in docs.iter().enumerate() {
            if let Some(t) = top.threshold() {
                let mut bound = extra.should_ub;
                for (i, c) in cursors.iter().enumerate() {
                    let f = c.freqs[at[i][j] as usize] as usize;
                    bound += by_tf[i].get(f).copied().unwrap_or(c.ub);
                }
                if loosen(bound) < t {
                    continue;
                }
            }
            tf.fill(0);
            for (i, c) in cursors.iter().enumerate() {
                tf[c.term] = c.freqs[at[i][j] as usize];
            }
            for c in extra.should.iter_mut() {
                c.seek(doc, stats)?;
                if c.doc == doc {
                    tf[c.term] = c.tf(stats)?;
                }
            }
            stats.docs_scored += 1;
            let s = q.bm25_sum(&tf, part.lens[doc as usize]);
            // Only a row whose score could enter is asked whether it is
            // allowed, and its positions read (a phrase scores as its
            // words' AND).
            if top.threshold().is_some_and(|t| s < t) {
                continue;
            }
            let addr = part.rowaddrs[doc as usize];
            if allow(addr)
                && !extra.excluded(doc, stats)?
                && (q.op != MatchOp::Phrase
                    || phrase_at_places(q, cursors, |i| at[i][j] as usize, stats)?)
            {
                top.push(Scored { addr, score: s });
            }
        }
        for (c, p) in cursors.iter_mut().zip(&next_at) {
            if let Some(p) = *p {
                c.move_to(p);
            }
        }
        if end == END {
            return Ok(());
        }
        d = end + 1;
    }
}

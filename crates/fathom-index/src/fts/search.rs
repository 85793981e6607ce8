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
use std::collections::BinaryHeap;

use super::posting::{self, BLOCK};
use super::segment::{FtsSegment, Partition};
use crate::cache::IndexCache;
use crate::error::Result;

use super::cursor::{BlockPositions, Cursor, END};
use super::nested::{TreeEval, nested};
pub use super::query::{Corpus, Fuzzy, MAX_EXPANSIONS, MatchOp, Occur, Query, accepts, split_slop};

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
        if q.needs_positions() && !self.params.with_position {
            return Err(crate::error::Error::InvalidInput(format!(
                "a phrase query needs positions: inverted index segment {} was built without \
                 them (CREATE INDEX ... USING INVERTED (col) WITH (with_position = true))",
                self.uuid
            )));
        }
        let seg_docs: usize = self.parts.iter().map(|p| p.num_docs()).sum();
        let seg_tokens: u64 = self.parts.iter().map(|p| p.total_tokens).sum();
        // How each term drives the search: its part in a flat query; in
        // a nested one, whether every match holds it, some may, or it is
        // only read to evaluate the clauses.
        let roles = match &q.tree {
            None => Some(q.occur.clone()),
            Some(_) => q.nested_roles(),
        };
        let role = |i: usize| roles.as_ref().map_or(Occur::Should, |r| r[i]);
        for part in &self.parts {
            let mut lists = Vec::new();
            for (i, t) in q.terms.iter().enumerate() {
                if let Some(l) = part.posting(t, cache).await? {
                    lists.push((i, l));
                } else if role(i) == Occur::Must {
                    lists.clear();
                    break;
                }
            }
            if !lists.iter().any(|(i, _)| role(*i) != Occur::MustNot) {
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
            if roles.is_none() {
                nested(part, q, cursors, allow, top, &mut stats)?;
                continue;
            }
            let (mut must, mut should, mut not) = (vec![], vec![], vec![]);
            for c in cursors {
                match role(c.term) {
                    Occur::Must => must.push(c),
                    Occur::Should => should.push(c),
                    Occur::MustNot => not.push(c),
                }
            }
            // A nested query's sum of term scores bounds a row's score
            // (each term is scored in one place at most): searched as a
            // flat one, its clauses evaluated on each row that could
            // enter, the other terms read only for that.
            let tree = q.tree.as_ref().map(|_| TreeEval {
                side: std::mem::take(&mut not),
                tf: vec![0; q.terms.len()],
                pos: vec![vec![]; q.terms.len()],
                with_pos: q.needs_positions(),
            });
            let mut extra = Extra {
                should,
                not,
                should_ub: 0.0,
                tree,
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
    /// A nested query's clause evaluation.
    tree: Option<TreeEval>,
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
                let s = match extra.tree.as_mut() {
                    None => Some(s),
                    Some(te) => {
                        let placed = cursors.iter_mut().filter(|c| c.doc == pd).map(|c| {
                            let p = c.pos;
                            (c, p)
                        });
                        te.eval(part, q, pd, placed, stats)?
                    }
                };
                if let Some(s) = s.filter(|s| theta.is_none_or(|t| *s >= t)) {
                    top.push(Scored { addr, score: s });
                }
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
    let mut union: Vec<u32> = Vec::new();
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
        // When the required terms' bounds in this window cannot reach the
        // k-th score, a row needs an optional term: the candidates are
        // the optional terms' documents (in the window, cut at the end of
        // their current blocks), not the lead's.
        let must_bound: f32 = cursors.iter().map(|c| c.bound_in(c.block)).sum();
        let need_optional =
            !extra.should.is_empty() && top.threshold().is_some_and(|t| loosen(must_bound) < t);
        if need_optional {
            union.clear();
            let mut w_end = end;
            let mut any = false;
            for c in extra.should.iter_mut() {
                c.seek(d, stats)?;
                if c.doc == END {
                    continue;
                }
                any = true;
                c.ensure(stats)?;
                w_end = w_end.min(c.last_doc(c.block));
            }
            if !any {
                // No optional term is left: nothing more can enter.
                return Ok(());
            }
            for c in extra.should.iter() {
                if c.doc != END {
                    union.extend(c.docs[c.pos..].iter().take_while(|x| **x <= w_end));
                }
            }
            union.sort_unstable();
            union.dedup();
            end = w_end;
            let lead = &mut cursors[0];
            lead.ensure(stats)?;
            let mut p = lead.pos;
            let mut u = 0;
            while p < lead.docs.len() && lead.docs[p] <= end {
                let doc = lead.docs[p];
                while u < union.len() && union[u] < doc {
                    u += 1;
                }
                if u < union.len() && union[u] == doc {
                    docs.push(doc);
                    at[0].push(p as u32);
                }
                p += 1;
            }
            next_at[0] = Some(p);
        } else {
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
            if !allow(addr) || extra.excluded(doc, stats)? {
                continue;
            }
            let s = match extra.tree.as_mut() {
                None => (q.op != MatchOp::Phrase
                    || phrase_at_places(q, cursors, |i| at[i][j] as usize, stats)?)
                .then_some(s),
                Some(te) => {
                    let placed = cursors
                        .iter_mut()
                        .enumerate()
                        .map(|(i, c)| (c, at[i][j] as usize))
                        .chain(extra.should.iter_mut().filter(|c| c.doc == doc).map(|c| {
                            let p = c.pos;
                            (c, p)
                        }));
                    te.eval(part, q, doc, placed, stats)?
                }
            };
            if let Some(s) = s.filter(|s| top.threshold().is_none_or(|t| *s >= t)) {
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

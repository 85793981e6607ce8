//! A cursor over one term's posting list for the searches in
//! [`super::search`]: blocks decoded on demand, seeks within and across
//! blocks, the term's block-max score bounds, and a block's positions
//! (phrase queries).

use std::sync::Arc;

use super::search::SearchStats;
use super::segment::PostingList;
use crate::error::Result;

/// A posting list being walked: the decoded block, the place in it,
/// and the term's score bounds.
pub(super) struct Cursor {
    pub(super) list: Arc<PostingList>,
    pub(super) term: usize,
    /// Upper bound of this term's score in any document.
    pub(super) ub: f32,
    /// Multiplier turning a stored block-max score into an upper bound.
    pub(super) scale: f32,
    pub(super) block: usize,
    pub(super) decoded: Option<usize>,
    pub(super) docs: Vec<u32>,
    pub(super) freqs: Vec<u32>,
    pub(super) pos: usize,
    pub(super) doc: u32,
    /// Positions of the decoded block's documents (phrase queries).
    pub(super) positions: BlockPositions,
}

/// A block's positions, flat: document `i`'s are
/// `flat[starts[i]..starts[i + 1]]`.
#[derive(Default)]
pub(super) struct BlockPositions {
    pub(super) block: Option<usize>,
    pub(super) flat: Vec<u32>,
    pub(super) starts: Vec<u32>,
}

pub(super) const END: u32 = u32::MAX;

impl Cursor {
    pub(super) fn ensure(&mut self, stats: &mut SearchStats) -> Result<()> {
        if self.decoded != Some(self.block) {
            self.list
                .decode(self.block, &mut self.docs, &mut self.freqs)?;
            self.decoded = Some(self.block);
            stats.blocks_decoded += 1;
        }
        Ok(())
    }

    pub(super) fn enter_block(&mut self, b: usize) {
        self.block = b;
        self.pos = 0;
        self.doc = self.list.first_docs.get(b).copied().unwrap_or(END);
    }

    pub(super) fn tf(&mut self, stats: &mut SearchStats) -> Result<u32> {
        self.ensure(stats)?;
        Ok(self.freqs[self.pos])
    }

    /// Positions of the current document.
    /// Decodes the current block's positions (once per block).
    pub(super) fn load_positions(&mut self, stats: &mut SearchStats) -> Result<()> {
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
    pub(super) fn positions_at(&self, pos: usize) -> &[u32] {
        let p = &self.positions;
        match (p.starts.get(pos), p.starts.get(pos + 1)) {
            (Some(a), Some(b)) => &p.flat[*a as usize..*b as usize],
            _ => &[],
        }
    }

    pub(super) fn next(&mut self, stats: &mut SearchStats) -> Result<()> {
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
    pub(super) fn seek(&mut self, target: u32, stats: &mut SearchStats) -> Result<()> {
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
    pub(super) fn containing(&self, target: u32) -> usize {
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
    pub(super) fn seek_block(&mut self, target: u32) {
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
    pub(super) fn move_to(&mut self, p: usize) {
        if p >= self.docs.len() {
            self.enter_block(self.block + 1);
        } else {
            self.pos = p;
            self.doc = self.docs[p];
        }
    }

    /// Decodes the current block and moves to its first document at or
    /// after `target` (within the block).
    pub(super) fn place(&mut self, target: u32, stats: &mut SearchStats) -> Result<()> {
        self.ensure(stats)?;
        self.pos += self.docs[self.pos..].partition_point(|d| *d < target);
        Ok(())
    }

    /// The last document block `b` may hold.
    pub(super) fn last_doc(&self, b: usize) -> u32 {
        self.list
            .first_docs
            .get(b + 1)
            .map_or(END, |f| f.saturating_sub(1))
    }

    /// Upper bound of this term's score in block `b`.
    pub(super) fn bound_in(&self, b: usize) -> f32 {
        self.list.block_max[b] * self.scale
    }

    /// Upper bound of this term's score at `target` and the last doc of
    /// the block that would hold it.
    pub(super) fn block_bound(&self, target: u32) -> (f32, u32) {
        let b = self.containing(target);
        (self.bound_in(b), self.last_doc(b))
    }
}

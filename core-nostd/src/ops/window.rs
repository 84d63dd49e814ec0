//! A receive window kept primed (I5): a consumed receive is replaced before it is
//! handed on.

use super::op::OpError;

/// Counts the receives posted on one receive queue against its depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWindow {
    depth: u32,
    posted: u32,
}

impl RecvWindow {
    /// A window of `depth` receives, none posted yet.
    pub const fn new(depth: u32) -> Self {
        Self { depth, posted: 0 }
    }

    /// Posts (through `post`, which says whether it could) until the window is full or
    /// `post` refuses; returns how many were posted. Done at connect, and after a
    /// [`consume`](Self::consume) that could not repost.
    pub fn fill(&mut self, mut post: impl FnMut() -> bool) -> u32 {
        let mut n = 0;
        while self.posted < self.depth && post() {
            self.posted += 1;
            n += 1;
        }
        n
    }

    /// One posted receive completed. Its replacement is posted (through `repost`)
    /// before this returns, so the caller hands the completion on only once the window
    /// is whole again. If the repost fails the window is one short and
    /// [`OpError::RepostFailed`] says so; [`fill`](Self::fill) tops it up later.
    pub fn consume(&mut self, repost: impl FnOnce() -> bool) -> Result<(), OpError> {
        debug_assert!(self.posted > 0, "a completion for a receive never posted");
        if repost() {
            return Ok(());
        }
        self.posted = self.posted.saturating_sub(1);
        Err(OpError::RepostFailed)
    }

    /// Receives posted now.
    pub const fn posted(&self) -> u32 {
        self.posted
    }

    /// The window's depth.
    pub const fn depth(&self) -> u32 {
        self.depth
    }
}

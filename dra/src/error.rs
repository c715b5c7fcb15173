//! What an allocation attempt can fail with; Display is kube's message text.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AllocateError {
    /// A claim or request that cannot be handled (unknown class, unsupported field, a
    /// feature that is off, a constraint that cannot hold...).
    #[error("{0}")]
    Invalid(String),
    /// A selector that does not compile, or fails or exceeds its cost limit at run time.
    #[error("{0}")]
    Cel(String),
    /// Pools of this node are invalid: not fatal, other nodes may still fit (kube wraps
    /// these in `ErrFailedAllocationOnNode`).
    #[error("{0}")]
    FailedOnNode(String),
    /// The search ran past its deadline.
    #[error("{0}")]
    Aborted(String),
}

impl AllocateError {
    /// Whether only this node is affected, so the scheduler may go on with others.
    pub fn is_failed_on_node(&self) -> bool {
        matches!(self, AllocateError::FailedOnNode(_))
    }
}

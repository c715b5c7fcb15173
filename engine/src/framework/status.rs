//! Plugin results, with kube-scheduler's codes.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Code {
    Success,
    Error,
    /// The pod does not fit now, but preemption might make room.
    Unschedulable,
    /// The pod does not fit and preemption cannot help.
    UnschedulableAndUnresolvable,
    Wait,
    Skip,
    Pending,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What the scheduler acts on beyond the code, typed so that no decision depends on a
/// message's wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The API server has no such pod any more (404 on its binding): deleted meanwhile.
    NotFound,
    /// The API server refused the change as conflicting (409 on a binding: the pod is
    /// bound already, or its UID changed); what happened must be read back.
    Conflict,
}

/// A reason: most are a plugin's constant, which a rejection then does not allocate (a
/// cycle may reject thousands of nodes).
pub(crate) type Reason = std::borrow::Cow<'static, str>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Vec<Reason>,
    /// The plugin that returned it, filled in by the framework.
    pub plugin: &'static str,
    pub cause: Option<Cause>,
}

impl Status {
    pub fn success() -> Self {
        Status::new(Code::Success, Vec::new())
    }

    pub fn new(code: Code, reasons: Vec<Reason>) -> Self {
        Status {
            code,
            reasons,
            plugin: "",
            cause: None,
        }
    }

    pub fn unschedulable(reason: impl Into<Reason>) -> Self {
        Status::new(Code::Unschedulable, vec![reason.into()])
    }

    /// kube's Pending: the pod waits for something outside the scheduler's objects (a
    /// leaf's answer), not for room; it is requeued without backoff.
    pub(crate) fn pending(reason: impl Into<Reason>) -> Self {
        Status::new(Code::Pending, vec![reason.into()])
    }

    pub fn unresolvable(reason: impl Into<Reason>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, vec![reason.into()])
    }

    pub fn error(reason: impl Into<Reason>) -> Self {
        Status::new(Code::Error, vec![reason.into()])
    }

    pub(crate) fn skip() -> Self {
        Status::new(Code::Skip, Vec::new())
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub(crate) fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }

    pub(crate) fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }

    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reasons.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}", self.message())
        }
    }
}

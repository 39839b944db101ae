//! The body of every error answer.

use baton_core::TaskStatus;
use serde::{Deserialize, Serialize};

/// The body of every error answer (design.md invariant 7).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// The error, under one key so that every error answer has the same shape.
    pub error: ErrorDetail,
}

/// What went wrong: `code` for programs to decide by, `message` for people, and for some
/// codes a fact to act on.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorDetail {
    /// An [`crate::ErrorCode`] as text (`not_found`, `conflict`, ...): what a client
    /// decides by. A newer server may send a code this release does not know.
    pub code: String,
    /// For people: what was wrong and, for invalid input, which field. Its wording may
    /// change between releases; decide by `code`, never by this.
    pub message: String,
    /// For a refused log chunk (416): the size the server holds, where to resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// For a state conflict (409): the task's current status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// For a runner request refused over an outage (503): true when the node still
    /// recorded the request as the runner's proof of life where every node reads it. Only
    /// then may the runner count the answer as contact; a node that lost Redis cannot
    /// vouch for the runner to the node that will adopt its claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_recorded: Option<bool>,
}

impl ErrorDetail {
    /// Whether this is an error of that code.
    pub fn is(&self, code: crate::ErrorCode) -> bool {
        self.code == code.as_str()
    }
}

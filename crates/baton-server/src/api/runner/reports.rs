//! A runner's reports as the exchange takes them, checked (a run's end, a completion with
//! its log tail), and each item's answer as the runner reads it.

use crate::auth::Runner;
use crate::dispatch::DispatchError;
use crate::dispatch::exchange::Completion;
use crate::error::ApiError;
use crate::state::AppState;
use baton_client::ErrorCode;
use baton_client::{CompletionItem, ItemAnswer, ItemResult, Outcome};
use baton_core::TaskStatus;
use baton_core::validate::{Invalid, check_not_negative};
use baton_store::{LogWrite, RunEnd};
use std::collections::BTreeMap;
use uuid::Uuid;

/// The longest error text a run's end may carry.
const MAX_ERROR_TEXT: usize = 64 << 10;

/// A completion as the exchange takes it: checked, with its log tail as a chunk.
pub(super) fn completion(
    state: &AppState,
    runner: &Runner,
    c: &CompletionItem,
) -> Result<(Completion, Option<LogWrite>), ApiError> {
    let end = run_end(
        state,
        c.outcome,
        c.exit_code,
        c.error.clone(),
        c.outputs.clone(),
        c.log_size,
    )?;
    let tail = match &c.log_tail {
        None => None,
        Some(tail) => {
            check_not_negative("log_tail.offset", tail.offset)?;
            let data = tail.bytes().ok_or_else(|| {
                ApiError::from(Invalid::new("log_tail.data", "must be standard base64"))
            })?;
            if data.len() > state.config.limits.max_log_chunk_bytes {
                return Err(ApiError::too_large(
                    ErrorCode::LogTailTooLarge,
                    "the log tail is over the log chunk limit",
                ));
            }
            let marks = chunk_marks(tail.marks.as_deref(), tail.offset, data.len())
                .map_err(|e| ApiError::from(Invalid::new("log_tail.marks", e)))?;
            Some(LogWrite {
                task: c.task_id,
                runner_id: runner.id,
                lease_id: c.lease_id,
                offset: tail.offset,
                data,
                marks,
            })
        }
    };
    Ok((
        Completion {
            task: c.task_id,
            lease_id: c.lease_id,
            end,
            traceparent: c.traceparent.clone(),
        },
        tail,
    ))
}

/// One item's answer from its result; `facts` gives the status (and attempt) to show.
pub(super) fn item_answer<T>(
    task_id: Uuid,
    result: Result<T, DispatchError>,
    facts: impl FnOnce(&T) -> (Option<TaskStatus>, Option<i32>),
) -> ItemAnswer {
    match result {
        Ok(v) => {
            let (status, attempt) = facts(&v);
            ItemAnswer {
                task_id,
                result: ItemResult::Done,
                status,
                attempt,
                message: None,
                secret_env: BTreeMap::new(),
            }
        }
        Err(e) => {
            let result = e.item_result();
            let e = ApiError::from(e);
            ItemAnswer {
                task_id,
                result,
                status: e.task_status,
                attempt: None,
                message: Some(e.message),
                secret_env: BTreeMap::new(),
            }
        }
    }
}

/// A runner's report of how a run ended, checked.
pub(super) fn run_end(
    state: &AppState,
    outcome: Outcome,
    exit_code: Option<i32>,
    error: Option<String>,
    outputs: Option<serde_json::Value>,
    log_size: Option<i64>,
) -> Result<RunEnd, ApiError> {
    if error.as_ref().is_some_and(|e| e.len() > MAX_ERROR_TEXT) {
        return Err(ApiError::too_large(
            ErrorCode::ErrorTooLarge,
            format!("error text over {MAX_ERROR_TEXT} bytes"),
        ));
    }
    if let Some(outputs) = &outputs {
        crate::admission::check_json_floats("outputs", outputs)?;
        crate::admission::check_json_nul("outputs", outputs)?;
        let size = serde_json::to_vec(outputs)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > state.config.limits.max_payload_bytes {
            return Err(ApiError::too_large(
                ErrorCode::OutputsTooLarge,
                format!("outputs of {size} bytes, over the limit"),
            ));
        }
    }
    if let Some(size) = log_size {
        check_not_negative("log_size", size)?;
    }
    Ok(RunEnd {
        outcome: outcome.status(),
        exit_code,
        error,
        outputs,
        log_size,
    })
}

/// The marks of a chunk of `len` bytes at `offset`, from their text (a header's or a
/// tail's): none when the runner sent none.
pub(super) fn chunk_marks(
    text: Option<&str>,
    offset: i64,
    len: usize,
) -> Result<Vec<baton_core::log_marks::Mark>, String> {
    text.map_or(Ok(Vec::new()), |text| {
        baton_core::log_marks::decode(text, offset, len)
    })
}

//! Test-only faults of the runner exchange (`--fault`, baton-core's `Fault`): answers,
//! results and output held, resends refused — each as a frozen node or a slow link would, while the
//! runner's other requests are answered at once. A node started without one pays a
//! comparison per exchange.

use super::super::DispatchError;
use super::super::Dispatcher;
use baton_client::LeasedTask;
use baton_core::fault::Fault;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// When the held answer goes, once one is held: resends refused until then.
static ANSWER_HELD_UNTIL: Mutex<Option<Instant>> = Mutex::new(None);
/// When the held results go, counted from the first result that arrived.
static RESULTS_HELD_UNTIL: Mutex<Option<Instant>> = Mutex::new(None);

/// `hold-answer` and `hold-answer-refusing-resends`: the first answer that hands out a
/// task of the queue waits that long after its commit before it goes.
pub(super) async fn hold_answer(dispatcher: &Dispatcher, tasks: &[LeasedTask]) {
    static HELD: AtomicBool = AtomicBool::new(false);
    let (queue, seconds) = match &dispatcher.config.fault {
        Some(Fault::HoldAnswer { queue, seconds })
        | Some(Fault::HoldAnswerRefusingResends { queue, seconds }) => (queue, *seconds),
        _ => return,
    };
    if tasks.iter().any(|t| &t.queue == queue) && !HELD.swap(true, Ordering::SeqCst) {
        tracing::error!(
            queue,
            seconds,
            "fault injection: holding an answer that hands out tasks"
        );
        let held = Duration::from_secs(seconds);
        *ANSWER_HELD_UNTIL.lock().expect("fault lock") = Some(Instant::now() + held);
        tokio::time::sleep(held).await;
    }
}

/// `hold-answer-refusing-resends`: a resend arriving while the answer is held is refused.
pub(super) fn refuse_resend(dispatcher: &Dispatcher, retry: bool) -> Result<(), DispatchError> {
    if !retry
        || !matches!(
            dispatcher.config.fault,
            Some(Fault::HoldAnswerRefusingResends { .. })
        )
    {
        return Ok(());
    }
    let until = *ANSWER_HELD_UNTIL.lock().expect("fault lock");
    if until.is_some_and(|until| Instant::now() < until) {
        tracing::error!("fault injection: refusing a resend while its answer is held");
        return Err(DispatchError::unavailable(
            "fault injection: resend refused",
        ));
    }
    Ok(())
}

/// `hold-logs`: a request carrying output waits that long before it is stored.
pub(super) async fn hold_logs(dispatcher: &Dispatcher, carries_logs: bool) {
    if let Some(Fault::HoldLogs { seconds }) = dispatcher.config.fault
        && carries_logs
    {
        tracing::error!(seconds, "fault injection: holding a chunk of output");
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }
}

/// `hold-results`: an exchange carrying a result waits until the hold's end.
pub(super) async fn hold_results(dispatcher: &Dispatcher, carries_results: bool) {
    let Some(Fault::HoldResults { seconds }) = dispatcher.config.fault else {
        return;
    };
    if !carries_results {
        return;
    }
    let until = *RESULTS_HELD_UNTIL
        .lock()
        .expect("fault lock")
        .get_or_insert_with(|| Instant::now() + Duration::from_secs(seconds));
    if Instant::now() < until {
        tracing::error!("fault injection: holding an exchange that carries results");
        tokio::time::sleep_until(until.into()).await;
    }
}

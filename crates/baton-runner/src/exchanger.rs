//! The agent's conversation with the server, batched: every start acknowledgement and
//! every completion of every slot goes into the next `POST /v1/runner/exchange`, with the
//! heartbeat when one is due and a request for as many tasks as there are free slots.
//! One request answers them all; each item gets its own answer.
//!
//! Two exchanges may be in flight at once, so a report never waits behind a long poll:
//!
//! - the **report** exchange carries the items that have gathered (and the heartbeat),
//!   never parks, and asks for work only while no poll is out;
//! - the **poll** carries no items, asks for work for every free slot and parks on the
//!   server until work arrives.
//!
//! Whatever arrives while an exchange is in flight goes into the next one, so the busier
//! the agent, the more each request carries. An exchange that asked for work and got no
//! answer is sent again as it was (same request id, `retry`), so the server hands back
//! what it leased instead of stranding it.
//!
//! Every exchange that asks for work asks `start_leased`: the tasks arrive started, and
//! their executors run them without a start item — one round trip per task, the
//! completion's, which asks for the next ones.

use crate::config::RunnerConfig;
use crate::retry::{CallError, Stop, classify, outage_with_presence};
use crate::tracker::Tracker;
use baton_client::{
    Client, ClientError, CompletionItem, Exchange, ExchangeAnswer, ItemAnswer, ItemResult,
    LeasedTask, StartItem,
};
use baton_core::LeaseId;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// What an item's answer means to the executor that sent it.
pub(crate) type ItemOutcome = Result<ItemAnswer, CallError>;

enum Item {
    Start(StartItem, oneshot::Sender<ItemOutcome>),
    Complete(Box<CompletionItem>, oneshot::Sender<ItemOutcome>),
}

/// How executors hand their items to the exchanger. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Reports {
    items: mpsc::UnboundedSender<Item>,
    heard: tokio::sync::watch::Receiver<u64>,
}

impl Reports {
    /// Acknowledges a lease; `done` means the task may run now. `traceparent`: the
    /// caller's span, which the node's span for the item continues.
    pub(crate) async fn start(
        &self,
        task_id: Uuid,
        lease_id: LeaseId,
        traceparent: Option<String>,
    ) -> ItemOutcome {
        let (reply, answer) = oneshot::channel();
        let item = StartItem {
            task_id,
            lease_id,
            traceparent,
        };
        self.send(Item::Start(item, reply))?;
        answered(answer).await
    }

    /// Reports how a run ended.
    pub(crate) async fn complete(&self, item: CompletionItem) -> ItemOutcome {
        let (reply, answer) = oneshot::channel();
        self.send(Item::Complete(Box::new(item), reply))?;
        answered(answer).await
    }

    /// Changes whenever the server answers again after failed exchanges: an item waiting
    /// out its backoff may go now (`Retrier::woken_by`).
    pub(crate) fn heard(&self) -> tokio::sync::watch::Receiver<u64> {
        self.heard.clone()
    }

    fn send(&self, item: Item) -> Result<(), CallError> {
        self.items
            .send(item)
            .map_err(|_| CallError::Local("the agent is stopping".into()))
    }
}

async fn answered(answer: oneshot::Receiver<ItemOutcome>) -> ItemOutcome {
    answer
        .await
        .map_err(|_| CallError::Local("the agent is stopping".into()))?
}

/// An item's answer as the executor acts on it: `done` goes ahead; `stale` and `gone`
/// stop the task; `retry` is a transient failure.
pub(crate) fn outcome(answer: ItemAnswer) -> ItemOutcome {
    match answer.result {
        ItemResult::Done => Ok(answer),
        ItemResult::Stale | ItemResult::Gone => Err(CallError::Stop(Stop::LeaseGone)),
        // The node answered, so it heard us; the item waits for its Postgres.
        ItemResult::Retry => Err(CallError::StoresOut(
            answer
                .message
                .unwrap_or_else(|| "the server could not record it".into()),
        )),
    }
}

/// A leased task and the slot it holds until its executor is done.
pub(crate) struct Assigned {
    pub task: LeasedTask,
    pub slot: OwnedSemaphorePermit,
    /// Its entry in the tracker, made before any later heartbeat could leave it out.
    pub control: crate::tracker::TaskControl,
    /// When the exchange that leased it was first sent: a task that arrives started was
    /// started on the server after this, and its timeout runs from here.
    pub since: Instant,
}

/// Why the exchanger stopped asking for work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Asked to stop.
    Shutdown,
    /// The server does not know this runner (401).
    Unregistered,
    /// The server cannot serve this agent's version (426).
    Incompatible(String),
}

/// What the exchanger needs from the agent.
pub(crate) struct Setup {
    pub client: Client,
    pub config: Arc<RunnerConfig>,
    pub boot_id: Uuid,
    pub tracker: Arc<Tracker>,
    pub slots: Arc<Semaphore>,
    /// No new work while this says why not (low disk, an ephemeral runner that has its
    /// one task).
    pub hold: Arc<dyn Fn() -> Option<String> + Send + Sync>,
    /// Cancelled: stop leasing, keep reporting until the agent drops its handles.
    pub stop_leasing: CancellationToken,
}

/// Starts the exchanger; leased tasks arrive on the returned receiver.
pub(crate) fn spawn(setup: Setup) -> (Reports, mpsc::Receiver<Assigned>, JoinHandle<Ended>) {
    let (items, incoming) = mpsc::unbounded_channel();
    let (assign, assigned) = mpsc::channel(1024);
    let (heard_again, heard) = tokio::sync::watch::channel(0);
    let handle = tokio::spawn(run(setup, incoming, assign, heard_again));
    (Reports { items, heard }, assigned, handle)
}

type Flight = JoinHandle<Flown>;

/// The server time of the newest answer the runner had (`None`: it had none yet).
type AsOf = Option<chrono::DateTime<chrono::Utc>>;

/// A leasing exchange out, with what its tasks' starts are bounded by: every task it
/// leases is started on the server after it was first sent — after `as_of` on the
/// server's clock, and after `first_sent` on ours (a resend keeps the first's).
#[derive(Debug, Clone, Copy)]
struct Leasing {
    as_of: AsOf,
    first_sent: Instant,
}

impl Leasing {
    fn now(lanes: &Lanes) -> Leasing {
        Leasing {
            as_of: lanes.answered_at,
            first_sent: Instant::now(),
        }
    }
}

struct Lanes {
    /// The parked poll.
    poll: Option<(Flight, Leasing)>,
    report: Option<(Flight, Vec<oneshot::Sender<ItemOutcome>>)>,
    /// Whether the report in flight asks for work.
    report_leasing: Option<Leasing>,
    /// A leasing exchange that got no answer, to send again as it was.
    unanswered: Option<(Exchange, Leasing)>,
    failures: u32,
    /// No new poll before this (backoff after failures).
    quiet_until: Instant,
    /// When the last heartbeat went out; `None`: one is due now.
    last_beat: Option<Instant>,
    /// When an idle poll last carried the (empty) list.
    idle_listed: Instant,
    poll_sent: Instant,
    /// The server's clock in the newest answer: a heartbeat's list is as of then.
    answered_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Told when an answer comes after failures (`Reports::heard`).
    heard_again: tokio::sync::watch::Sender<u64>,
}

async fn run(
    setup: Setup,
    mut incoming: mpsc::UnboundedReceiver<Item>,
    assign: mpsc::Sender<Assigned>,
    heard_again: tokio::sync::watch::Sender<u64>,
) -> Ended {
    let heartbeat = Duration::from_secs(setup.config.heartbeat_s.max(1));
    let fence_after = Duration::from_secs(setup.config.fence_after_s);
    let mut pending: Vec<Item> = Vec::new();
    let mut lanes = Lanes {
        poll: None,
        report: None,
        report_leasing: None,
        unanswered: None,
        failures: 0,
        quiet_until: Instant::now(),
        last_beat: Some(Instant::now()),
        idle_listed: Instant::now(),
        poll_sent: Instant::now(),
        answered_at: None,
        heard_again,
    };
    let mut tick = tokio::time::interval(heartbeat.min(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reports_open = true;
    loop {
        let leasing = !setup.stop_leasing.is_cancelled() && (setup.hold)().is_none();
        send_report(&setup, &mut lanes, &mut pending, leasing, heartbeat);
        if leasing {
            send_poll(&setup, &mut lanes, heartbeat);
        }
        if !reports_open && pending.is_empty() && lanes.report.is_none() && !leasing {
            return Ended::Shutdown;
        }
        tokio::select! {
            item = incoming.recv(), if reports_open => match item {
                Some(item) => {
                    pending.push(item);
                    // Everything already queued goes into the same exchange.
                    while let Ok(item) = incoming.try_recv() {
                        pending.push(item);
                    }
                }
                None => reports_open = false,
            },
            flown = flight(lanes.poll.as_mut().map(|(f, _)| f)), if lanes.poll.is_some() => {
                let (_, leasing) = lanes.poll.take().expect("in flight");
                let early = lanes.poll_sent.elapsed() + Duration::from_secs(1)
                    < Duration::from_secs(setup.config.wait_s.into());
                if early && matches!(&flown.1, Ok(a) if a.tasks.is_empty()) {
                    // A parked poll answered early with nothing: the server has news for
                    // this runner (a cancel): the heartbeat asks for it now.
                    lanes.last_beat = None;
                }
                if let Some(ended) = landed(&setup, &mut lanes, flown, (Vec::new(), Some(leasing)), &assign).await {
                    return ended;
                }
            }
            flown = flight(lanes.report.as_mut().map(|(f, _)| f)), if lanes.report.is_some() => {
                let (_, replies) = lanes.report.take().expect("in flight");
                let leasing = lanes.report_leasing.take();
                if let Some(ended) = landed(&setup, &mut lanes, flown, (replies, leasing), &assign).await {
                    return ended;
                }
            }
            _ = setup.slots.clone().acquire_owned(), if leasing && lanes.poll.is_none() && setup.slots.available_permits() == 0 => {
                // A slot freed: the loop sends a poll for it.
            }
            _ = tokio::time::sleep_until(lanes.quiet_until), if lanes.poll.is_none() && Instant::now() < lanes.quiet_until => {
                // The backoff after a failure is over: the loop polls again.
            }
            _ = tick.tick() => {
                if setup.tracker.is_empty() {
                    // Idle: the long poll is the heartbeat.
                    setup.tracker.contact();
                } else if setup.tracker.silent_for() > fence_after {
                    setup.tracker.abandon_all();
                }
            }
            _ = setup.stop_leasing.cancelled(), if lanes.poll.is_some() => {
                // A parked poll is left to the server; what it leases, started there, is
                // never run here: this agent is stopping, and its runs end as a lost or
                // restarted runner's.
                if let Some((poll, _)) = lanes.poll.take() {
                    poll.abort();
                }
            }
        }
    }
}

/// What was sent, its answer, and when it was sent.
type Flown = (Exchange, Result<ExchangeAnswer, ClientError>, Instant);

/// The answer of an exchange in flight (only polled while there is one).
async fn flight(f: Option<&mut Flight>) -> Flown {
    match f.expect("guarded by is_some").await {
        Ok(flown) => flown,
        Err(e) => panic!("an exchange task failed: {e}"),
    }
}

fn fly(client: &Client, exchange: Exchange, answer_within: Duration) -> Flight {
    let client = client.clone();
    tokio::spawn(async move {
        let sent_at = Instant::now();
        let answer = client.exchange_within(&exchange, answer_within).await;
        (exchange, answer, sent_at)
    })
}

impl Lanes {
    /// What a heartbeat's list is as of: the newest answer, but never later than what any
    /// leasing exchange still out was sent after. The server ends as forgotten only runs
    /// started well before this; a run whose start is still on its way to this runner —
    /// its answer held up by a frozen node or a slow link while the other lane's answers
    /// come back from other nodes — started after its exchange was sent, so it is never
    /// one of them, however long the answer takes.
    /// An exchange first sent longer than `fence_after` ago bounds nothing: its tasks
    /// will not be started (`landed`), and a run forgotten meanwhile is ended.
    fn list_as_of(&self, fence_after: Duration) -> AsOf {
        let out = [
            self.poll.as_ref().map(|(_, leasing)| *leasing),
            self.report_leasing,
            self.unanswered.as_ref().map(|(_, leasing)| *leasing),
        ];
        out.into_iter()
            .flatten()
            .filter(|leasing| leasing.first_sent.elapsed() <= fence_after)
            .map(|leasing| leasing.as_of)
            .fold(self.answered_at, |list, sent| match (list, sent) {
                (Some(list), Some(sent)) => Some(list.min(sent)),
                // Sent before any answer came: nothing this runner heard bounds its tasks'
                // starts from below, so the list may call none of them forgotten.
                (_, None) => Some(chrono::DateTime::UNIX_EPOCH),
                (None, Some(_)) => None,
            })
    }
}

/// Sends the items that have gathered (and the heartbeat, when due), if the report lane
/// is free.
fn send_report(
    setup: &Setup,
    lanes: &mut Lanes,
    pending: &mut Vec<Item>,
    leasing: bool,
    heartbeat: Duration,
) {
    let beat_due =
        !setup.tracker.is_empty() && lanes.last_beat.is_none_or(|at| at.elapsed() >= heartbeat);
    if lanes.report.is_some() || (pending.is_empty() && !beat_due) {
        return;
    }
    let mut exchange = Exchange {
        request_id: Uuid::new_v4(),
        boot_id: setup.boot_id,
        ..Exchange::default()
    };
    // Answers come back starts first, then completions: the replies are kept so.
    let (mut start_replies, mut completion_replies) = (Vec::new(), Vec::new());
    let take = pending.len().min(crate::config::MAX_EXCHANGE_ITEMS);
    for item in pending.drain(..take) {
        match item {
            Item::Start(start, reply) => {
                exchange.starts.push(start);
                start_replies.push(reply);
            }
            Item::Complete(completion, reply) => {
                exchange.completions.push(*completion);
                completion_replies.push(reply);
            }
        }
    }
    if beat_due {
        heartbeat_with(setup, lanes, &mut exchange);
    }
    if leasing && lanes.poll.is_none() && lanes.unanswered.is_none() {
        exchange.max = setup.slots.available_permits() as u32;
        exchange.start_leased = true;
        exchange.secrets_at_start = true;
        lanes.report_leasing = Some(Leasing::now(lanes));
    }
    start_replies.extend(completion_replies);
    lanes.report = Some((
        fly(&setup.client, exchange, setup.config.exchange_timeout()),
        start_replies,
    ));
}

/// Makes `exchange` a heartbeat too: the runs this runner holds, as of when.
fn heartbeat_with(setup: &Setup, lanes: &mut Lanes, exchange: &mut Exchange) {
    exchange.running_as_of = lanes.list_as_of(Duration::from_secs(setup.config.fence_after_s));
    exchange.running = Some(setup.tracker.leases());
    lanes.last_beat = Some(Instant::now());
}

/// How long after dropping runs (`Tracker::dropped_runs`) an idle agent's polls carry its
/// empty list, at the heartbeat's pace: past the server's `forgotten_run_after_s` (15 s)
/// from the drop, so the runs dropped are ended as forgotten whatever their age.
fn idle_lists_window(fence_after: Duration) -> Duration {
    fence_after.max(Duration::from_secs(60))
}

/// How often an idle agent's poll carries its empty list otherwise: a run the server
/// counts as this runner's that the agent never heard of (a start whose answer never
/// came, a task the node could not hand over) is ended within this, and idle polls cost
/// the server one Postgres query per runner this often, not per poll.
const IDLE_LIST_EVERY: Duration = Duration::from_secs(600);

/// Asks for work for every free slot, parking on the server, if the poll lane is free.
/// An idle runner's poll is its heartbeat when one is due and it has lately dropped runs
/// the server still counts as its own (it fenced itself, an answer came too late to start
/// its tasks, a result was refused), and every [`IDLE_LIST_EVERY`] otherwise: its empty
/// list gets such runs ended as forgotten, which nothing else would now that hearing a
/// runner ends nothing. Other idle polls carry no list, and cost no Postgres query.
fn send_poll(setup: &Setup, lanes: &mut Lanes, heartbeat: Duration) {
    if lanes.poll.is_some() || Instant::now() < lanes.quiet_until {
        return;
    }
    // A report exchange that is asking for work already counts for the free slots.
    if lanes.report.is_some() {
        return;
    }
    let (exchange, leasing) = match lanes.unanswered.take() {
        Some(resend) => resend,
        None => {
            let free = setup.slots.available_permits() as u32;
            if free == 0 {
                return;
            }
            let mut poll = Exchange {
                request_id: Uuid::new_v4(),
                boot_id: setup.boot_id,
                max: free,
                wait_s: setup.config.wait_s,
                start_leased: true,
                // A parked poll's tasks arrive unstarted: their secrets come with the
                // start's answer (executor.rs `acknowledge`).
                secrets_at_start: true,
                ..Exchange::default()
            };
            let beat_due = lanes.last_beat.is_none_or(|at| at.elapsed() >= heartbeat);
            let fence_after = Duration::from_secs(setup.config.fence_after_s);
            let doubt = setup
                .tracker
                .lists_while_idle(idle_lists_window(fence_after))
                || lanes.idle_listed.elapsed() >= IDLE_LIST_EVERY;
            if setup.tracker.is_empty() && beat_due && doubt {
                heartbeat_with(setup, lanes, &mut poll);
                lanes.idle_listed = Instant::now();
            }
            (poll, Leasing::now(lanes))
        }
    };
    lanes.poll_sent = Instant::now();
    lanes.poll = Some((
        fly(&setup.client, exchange, setup.config.exchange_timeout()),
        leasing,
    ));
}

/// An exchange came back: answer its items, hand out its tasks, apply its verdicts.
async fn landed(
    setup: &Setup,
    lanes: &mut Lanes,
    (sent, answer, sent_at): Flown,
    (replies, leasing): (Vec<oneshot::Sender<ItemOutcome>>, Option<Leasing>),
    assign: &mpsc::Sender<Assigned>,
) -> Option<Ended> {
    crate::metrics::exchange_answered(&answer);
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => return failed(setup, lanes, (sent, sent_at, leasing), replies, e),
    };
    if lanes.failures > 0 {
        // Heard again after failures: what waits out a backoff goes now.
        lanes.heard_again.send_modify(|n| *n += 1);
    }
    lanes.failures = 0;
    if answer.presence_recorded != Some(false) {
        // Only a node whose presence reaches every node speaks for us to all of them.
        setup.tracker.contact_at(sent_at.into_std());
    }
    let answered_at = answer.answered_at;
    setup.tracker.apply(&baton_client::HeartbeatResponse {
        cancel: answer.cancel,
        gone: answer.gone,
    });
    let outcomes = answer.starts.into_iter().chain(answer.completions);
    for (reply, item) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome(item));
    }
    let fence_after = Duration::from_secs(setup.config.fence_after_s);
    let first_sent = leasing.map_or(sent_at, |l| l.first_sent.min(sent_at));
    // When the tasks were started at the earliest, on our clock: after the request
    // arrived and the server's look for work began (`leased_after_ms`: a parked poll
    // waits first) — after its first send, for a resend answered from the record of
    // what the first attempt started. Their time runs from then, here as there.
    let since = match answer.leased_after_ms {
        _ if sent.retry => first_sent,
        Some(ms) => sent_at + Duration::from_millis(ms),
        // A server of an earlier release does not say: from the answer, as it always was.
        None => Instant::now(),
    };
    if !answer.tasks.is_empty() && first_sent.elapsed() > fence_after {
        // An answer held up longer than the fence (a partition that healed, and TCP
        // delivered what it had): by now a node may have called this runner lost and
        // handed its tasks to another. They are not started, nor reported: the server
        // ends them as forgotten once a heartbeat leaves them out.
        tracing::warn!(
            tasks = answer.tasks.len(),
            late_s = first_sent.elapsed().as_secs(),
            "an answer came back after the fence: its tasks are not started"
        );
        setup.tracker.dropped_runs();
    } else {
        for task in answer.tasks {
            let slot = setup
                .slots
                .clone()
                .try_acquire_owned()
                .expect("the server hands out at most `max` tasks");
            // Tracked before the pins on its exchange go (below): the next heartbeat lists
            // it, whenever the agent gets to it.
            let control = setup.tracker.insert(task.id, task.lease_id);
            let (id, lease) = (task.id, task.lease_id);
            let assigned = Assigned {
                task,
                slot,
                control,
                since,
            };
            if assign.send(assigned).await.is_err() {
                setup.tracker.remove(id, lease);
                return Some(Ended::Shutdown);
            }
        }
    }
    // Only now: a heartbeat list as of this answer may leave out its tasks only while
    // they are on their way to a slot, far less than the forgotten-run age.
    lanes.answered_at = lanes.answered_at.max(answered_at);
    None
}

fn failed(
    setup: &Setup,
    lanes: &mut Lanes,
    (sent, sent_at, leasing): (Exchange, Instant, Option<Leasing>),
    replies: Vec<oneshot::Sender<ItemOutcome>>,
    e: ClientError,
) -> Option<Ended> {
    if outage_with_presence(&e) {
        // The server's stores are out, not the server, and every node saw this request.
        setup.tracker.contact_at(sent_at.into_std());
    }
    let error = classify(e);
    let ended = match &error {
        CallError::Stop(Stop::Unregistered) => Some(Ended::Unregistered),
        CallError::Stop(Stop::Incompatible(reason)) => Some(Ended::Incompatible(reason.clone())),
        _ => None,
    };
    let resent = matches!(error, CallError::Transient(_) | CallError::StoresOut(_));
    if sent.max > 0 && !resent {
        // What it may have leased, started, will not come: ended once a list leaves it out.
        setup.tracker.dropped_runs();
    }
    if resent && sent.max > 0 {
        // What it may have leased is replayed to the same request, resent as it was;
        // until then heartbeats stay as of before it was first sent.
        let leasing = leasing.unwrap_or(Leasing {
            as_of: lanes.answered_at,
            first_sent: sent_at,
        });
        let resend = Exchange {
            retry: true,
            starts: Vec::new(),
            completions: Vec::new(),
            running: None,
            ..sent
        };
        lanes.unanswered = Some((resend, leasing));
    }
    lanes.failures += 1;
    let delay = setup.config.backoff().delay(lanes.failures, rand::random());
    lanes.quiet_until = Instant::now() + delay;
    crate::metrics::backoff();
    tracing::warn!(error = %error, retry_in_ms = delay.as_millis() as u64, "exchange failed");
    for reply in replies {
        let _ = reply.send(Err(error.clone()));
    }
    ended
}

//! RabbitMQ backend of the event bus (cluster deployment), on lapin.
//!
//! # Topology
//! Declared by [`declare_topology`] on every connect, idempotently (STYLE R19). With the
//! default prefix `sediment`, and one set of queues per [`WorkerKind`] (`index` shown):
//!
//! ```text
//! publish ──▶ sediment.events (topic) ──turn.appended──▶ sediment.index ──▶ consumer
//!                                                          ▲        │ Retry: copy with attempt+1
//!                     expired (per-message TTL = backoff)  │        ▼ and expiration = backoff
//!             sediment.index.retry ◀──index── sediment.retry (direct)
//!                                                                   │ Reject / last attempt
//!             sediment.index.parked ◀──index── sediment.parked (direct)
//! ```
//!
//! The parked queue has no consumer either: [`EventBus::replay_parked`] moves its messages back
//! to the work queue through the default exchange when a human asks.
//!
//! The retry queue has no consumer: its messages expire after their backoff and are
//! dead-lettered through the default exchange straight back to the work queue of their kind
//! (not to the topic exchange, which would fan them out to every kind again). The work queue
//! dead-letters to the parked exchange, so a message nacked without requeue by any client is
//! parked rather than dropped. The attempt count travels in the `x-sediment-attempt` header.
//!
//! A kind that no worker serves in this deployment ([`AmqpSettings::muted`]: `extract` when
//! L1 extraction is off) keeps its queues, but its work queue is not bound to the events
//! exchange (a binding left by an earlier start is removed), so its events are not routed at
//! all rather than piling up in a queue nobody consumes.
//!
//! Per-message TTLs expire only at the head of a queue, so a retry can wait behind a longer
//! backoff queued before it; backoffs are capped at [`MAX_RETRY_DELAY`](super::MAX_RETRY_DELAY), which bounds that.
//!
//! # Connections
//! One connection per bus, holding a publisher channel in confirm mode and one channel per
//! subscription. When an operation finds the connection (or the publisher channel) gone, the
//! bus opens a new connection, redeclares the topology and tries once more before failing with
//! `Unavailable`. Subscriptions on a lost connection end (`next()` returns `None`); the caller
//! subscribes again.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::AMQPUri;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer, ErrorKind, ExchangeKind,
};

use tracing::Instrument as _;

use crate::telemetry::propagate::{publish_span, TraceContext, TRACEPARENT, TRACESTATE};

use super::{
    retry_backoff, type_tag, BusError, BusResult, Delivery, DeliveryToken, Event, EventBus, Outcome, QueueStats,
    Replayed, Subscription, WorkerKind, DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_DELAY,
};

/// Header holding the delivery attempt (1-based) of a message.
const HEADER_ATTEMPT: &str = "x-sediment-attempt";
/// Header telling why a parked message was parked.
const HEADER_PARKED_REASON: &str = "x-sediment-parked-reason";
/// Headers the broker writes when it dead-letters a message; never copied into a new message.
const BROKER_DEATH_HEADERS: &[&str] = &["x-death", "x-first-death-", "x-last-death-"];
/// The broker's reason for the first dead-lettering: what a message another client nacked
/// into the parked queue has instead of [`HEADER_PARKED_REASON`].
const HEADER_FIRST_DEATH_REASON: &str = "x-first-death-reason";
const PARKED_REJECTED: &str = "rejected";
const PARKED_EXHAUSTED: &str = "max attempts reached";
const CONTENT_TYPE_JSON: &str = "application/json";
const APP_ID: &str = "sediment";
/// `messaging.system` of this bus's spans.
const SYSTEM: &str = "rabbitmq";
/// `delivery_mode` 2: the broker writes the message to disk in a durable queue.
const DELIVERY_MODE_PERSISTENT: u8 = 2;
/// How long opening a connection (TCP, TLS, AMQP handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REPLY_SUCCESS: u16 = 200;

/// Where the bus connects and how it retries.
#[derive(Clone)]
pub struct AmqpSettings {
    /// `amqp://user:password@host:port/vhost` (vhost `/` is `%2f`).
    pub url: String,
    /// First segment of every exchange and queue name; lets deployments share a vhost.
    pub prefix: String,
    /// Deliveries of one message before it is parked (0 is taken as 1).
    pub max_attempts: u32,
    /// Backoff after the first failed attempt; it doubles with each further attempt.
    pub retry_delay: Duration,
    /// Tests only: `x-expires` on every queue, so the queues of a crashed test vanish. The
    /// timer runs whenever a queue has no consumer, so never set it in production.
    pub queue_expires: Option<Duration>,
    /// Kinds no worker serves in this deployment: their events are not routed (see the module
    /// docs). Every process of a deployment must agree, since each declares the topology.
    pub muted: Vec<WorkerKind>,
}

impl Default for AmqpSettings {
    fn default() -> Self {
        Self {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned(),
            prefix: "sediment".to_owned(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retry_delay: DEFAULT_RETRY_DELAY,
            queue_expires: None,
            muted: Vec::new(),
        }
    }
}

impl fmt::Debug for AmqpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpSettings")
            .field("url", &redact_password(&self.url))
            .field("prefix", &self.prefix)
            .field("max_attempts", &self.max_attempts)
            .field("retry_delay", &self.retry_delay)
            .field("queue_expires", &self.queue_expires)
            .field("muted", &self.muted)
            .finish()
    }
}

impl AmqpSettings {
    /// The topic exchange every event is published to.
    pub fn events_exchange(&self) -> String {
        format!("{}.events", self.prefix)
    }

    /// The direct exchange that routes retry copies (routing key: the kind) to retry queues.
    pub fn retry_exchange(&self) -> String {
        format!("{}.retry", self.prefix)
    }

    /// The direct exchange that routes parked messages (routing key: the kind).
    pub fn parked_exchange(&self) -> String {
        format!("{}.parked", self.prefix)
    }

    /// The work queue of `kind`, the one its workers consume (and autoscale on).
    pub fn work_queue(&self, kind: WorkerKind) -> String {
        format!("{}.{}", self.prefix, kind.as_str())
    }

    /// Where retry copies of `kind` wait out their backoff.
    pub fn retry_queue(&self, kind: WorkerKind) -> String {
        format!("{}.{}.retry", self.prefix, kind.as_str())
    }

    /// Where messages of `kind` go after their last attempt or a reject; nothing consumes it.
    pub fn parked_queue(&self, kind: WorkerKind) -> String {
        format!("{}.{}.parked", self.prefix, kind.as_str())
    }

    fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }
}

/// The cluster [`EventBus`], on RabbitMQ. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct AmqpBus {
    shared: Arc<Shared>,
}

impl fmt::Debug for AmqpBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpBus")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl AmqpBus {
    /// Connects, opens the publisher channel in confirm mode and declares the topology.
    /// An unreachable broker is `Unavailable` (after at most 10 s); a bad URL or prefix, or
    /// a topology that conflicts with what the broker already has, is `Backend`.
    pub async fn connect(settings: AmqpSettings) -> BusResult<AmqpBus> {
        if settings.prefix.trim().is_empty() {
            return Err(BusError::Backend("amqp prefix must not be empty".into()));
        }
        let link = Link::open(&settings).await?;
        Ok(AmqpBus {
            shared: Arc::new(Shared {
                settings,
                link: Mutex::new(Arc::new(link)),
                reconnecting: tokio::sync::Mutex::new(()),
                subscriptions: AtomicU64::new(0),
            }),
        })
    }

    /// The settings the bus runs with (queue names derive from them).
    pub fn settings(&self) -> &AmqpSettings {
        &self.shared.settings
    }

    /// Number of messages in the parked queue of `kind`.
    pub async fn parked_count(&self, kind: WorkerKind) -> BusResult<u64> {
        self.shared.message_count(self.shared.settings.parked_queue(kind)).await
    }

    /// Closes the current connection, as a broker restart or network fault would; the next
    /// operation reconnects.
    #[cfg(feature = "testing")]
    pub async fn force_disconnect(&self) {
        let link = self.shared.current();
        let _ = link.connection.close(REPLY_SUCCESS, "closed by test".into()).await;
    }
}

#[async_trait]
impl EventBus for AmqpBus {
    async fn publish(&self, event: &Event) -> BusResult<()> {
        let body = serde_json::to_vec(event).map_err(|e| BusError::Backend(Box::new(e)))?;
        let message_id = uuid::Uuid::new_v4().to_string();
        let span = publish_span(event.routing_key(), SYSTEM);
        span.record("messaging.message.id", message_id.as_str());
        let mut headers = FieldTable::default();
        headers.insert(HEADER_ATTEMPT.into(), attempt_value(1));
        insert_trace(&mut headers, &TraceContext::of(&span));
        let properties = message_properties(&message_id, headers)
            .with_content_type(CONTENT_TYPE_JSON.into())
            .with_app_id(APP_ID.into())
            .with_timestamp(unix_now());
        let exchange = self.shared.settings.events_exchange();
        // Not mandatory: an event no worker kind listens to is simply dropped.
        self.shared
            .publish(&exchange, event.routing_key(), &body, properties, false)
            .instrument(span)
            .await?;
        tracing::debug!(routing_key = event.routing_key(), %message_id, "published event");
        Ok(())
    }

    async fn publish_delayed(&self, event: &Event, delay: Duration) -> BusResult<()> {
        let body = serde_json::to_vec(event).map_err(|e| BusError::Backend(Box::new(e)))?;
        let message_id = uuid::Uuid::new_v4().to_string();
        let span = publish_span(event.routing_key(), SYSTEM);
        span.record("messaging.message.id", message_id.as_str());
        let mut headers = FieldTable::default();
        headers.insert(HEADER_ATTEMPT.into(), attempt_value(1));
        insert_trace(&mut headers, &TraceContext::of(&span));
        let properties = message_properties(&message_id, headers)
            .with_content_type(CONTENT_TYPE_JSON.into())
            .with_app_id(APP_ID.into())
            .with_timestamp(unix_now());
        let sent = async {
            let queue = self.shared.delay_queue(event.routing_key(), delay).await?;
            // Mandatory: the delay queue was just declared, so a message no queue takes is a bug.
            self.shared.publish("", &queue, &body, properties, true).await
        };
        sent.instrument(span).await?;
        tracing::debug!(routing_key = event.routing_key(), %message_id, delay_ms = delay.as_millis() as u64, "published delayed event");
        Ok(())
    }

    async fn subscribe(&self, kind: WorkerKind, prefetch: u16) -> BusResult<Box<dyn Subscription>> {
        let id = self.shared.subscriptions.fetch_add(1, Ordering::Relaxed);
        let queue = self.shared.settings.work_queue(kind);
        let tag = format!("{queue}.{}", uuid::Uuid::new_v4().simple());
        let (channel, consumer) = self
            .shared
            .with_link("start consuming", |link| {
                let (queue, tag) = (queue.clone(), tag.clone());
                async move {
                    let channel = link.connection.create_channel().await?;
                    // Per consumer (global: false): at most `prefetch` unacked deliveries.
                    channel
                        .basic_qos(prefetch.max(1), BasicQosOptions { global: false })
                        .await?;
                    let options = BasicConsumeOptions {
                        no_local: false,  // ignored by RabbitMQ
                        no_ack: false,    // manual acks: settle() decides each message's fate
                        exclusive: false, // replicas of a worker compete on one queue
                        nowait: false,    // wait for consume-ok, so a missing queue fails here
                    };
                    let consumer = channel
                        .basic_consume(queue.into(), tag.into(), options, FieldTable::default())
                        .await?;
                    Ok((channel, consumer))
                }
            })
            .await?;
        Ok(Box::new(AmqpSubscription {
            shared: Arc::clone(&self.shared),
            kind,
            id,
            channel,
            consumer,
            cancelled: false,
        }))
    }

    async fn depth(&self, kind: WorkerKind) -> BusResult<Option<u64>> {
        let count = self.shared.message_count(self.shared.settings.work_queue(kind)).await?;
        Ok(Some(count))
    }

    async fn stats(&self, kind: WorkerKind) -> BusResult<QueueStats> {
        let settings = &self.shared.settings;
        let queues = [settings.work_queue(kind), settings.parked_queue(kind)];
        let [(ready, consumers), (parked, _)] = self.shared.queue_counts(queues).await?;
        Ok(QueueStats {
            ready,
            parked,
            consumers,
        })
    }

    /// Opens and closes a channel: a round trip to the broker, reconnecting once if needed.
    async fn ping(&self) -> BusResult<()> {
        self.shared
            .with_link("ping the broker", |link| async move {
                let channel = link.connection.create_channel().await?;
                channel.close(REPLY_SUCCESS, "OK".into()).await
            })
            .await
    }

    /// Takes parked messages one at a time (`basic.get`, unacked), publishes each copy straight
    /// to the work queue through the default exchange, and acks the original only once the
    /// copy is confirmed.
    async fn replay_parked(&self, kind: WorkerKind, limit: usize) -> BusResult<Vec<Replayed>> {
        let settings = &self.shared.settings;
        let (parked_queue, work_queue) = (settings.parked_queue(kind), settings.work_queue(kind));
        let mut replayed = Vec::new();
        // What is parked now, and no more: a replayed message its worker still cannot read
        // parks again at once, behind these, and must not be taken again by this replay.
        let parked_now = self.shared.message_count(parked_queue.clone()).await?;
        let limit = limit.min(usize::try_from(parked_now).unwrap_or(usize::MAX));
        if limit == 0 {
            return Ok(replayed);
        }
        // A channel of its own: the acks must go on the channel the messages came from, and a
        // missing queue closes the channel it was asked on.
        let channel = self
            .shared
            .with_link("open a channel", |link| async move {
                link.connection.create_channel().await
            })
            .await?;
        let result = async {
            while replayed.len() < limit {
                let taken = channel
                    .basic_get(parked_queue.as_str().into(), BasicGetOptions { no_ack: false })
                    .await
                    .map_err(|e| classify("take a parked message", e))?;
                let Some(message) = taken else { break };
                let raw = message.delivery;
                let headers = raw.properties.headers();
                let message_id = message_id_of(&raw.properties);
                let entry = Replayed {
                    reason: header_str(headers, HEADER_PARKED_REASON)
                        .or_else(|| header_str(headers, HEADER_FIRST_DEATH_REASON))
                        .unwrap_or_else(|| "unknown".to_owned()),
                    attempts: header_u32(headers, HEADER_ATTEMPT).unwrap_or(1).max(1),
                    event_type: type_tag(&raw.data),
                    message_id,
                };
                let properties = copy_properties(&entry.message_id, &raw.properties, 1, None);
                // Mandatory: a work queue that is gone must fail the replay, not drop the copy.
                let sent = self.shared.publish("", &work_queue, &raw.data, properties, true).await;
                if let Err(error) = sent {
                    // Back to the head of the parked queue at once; closing the channel would too.
                    requeue(&raw.acker).await;
                    return Err(error);
                }
                // Only now that the copy is confirmed: a crash before this line duplicates, never loses.
                raw.acker
                    .ack(BasicAckOptions { multiple: false })
                    .await
                    .map_err(|e| classify("remove a replayed message from the parked queue", e))?;
                tracing::info!(
                    queue = %work_queue,
                    message_id = %entry.message_id,
                    reason = %entry.reason,
                    attempts = entry.attempts,
                    "replayed parked message"
                );
                replayed.push(entry);
            }
            Ok::<(), BusError>(())
        }
        .await;
        let _ = channel.close(REPLY_SUCCESS, "OK".into()).await;
        result.map(|()| replayed)
    }
}

/// State shared by a bus, its clones and its subscriptions.
struct Shared {
    settings: AmqpSettings,
    /// The live connection; replaced wholesale on reconnect.
    link: Mutex<Arc<Link>>,
    /// Held while reconnecting, so concurrent failures open one new connection, not many.
    reconnecting: tokio::sync::Mutex<()>,
    /// Source of subscription ids, to refuse a delivery settled on the wrong subscription.
    subscriptions: AtomicU64,
}

impl Shared {
    fn current(&self) -> Arc<Link> {
        Arc::clone(&self.link.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces `failed` with a new connection, unless another task already did.
    async fn reconnect(&self, failed: &Arc<Link>) -> BusResult<Arc<Link>> {
        let _one_at_a_time = self.reconnecting.lock().await;
        let current = self.current();
        if !Arc::ptr_eq(&current, failed) {
            return Ok(current);
        }
        let link = Arc::new(Link::open(&self.settings).await?);
        *self.link.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&link);
        tracing::info!(prefix = %self.settings.prefix, "reconnected to the broker");
        Ok(link)
    }

    /// Runs `op` on the current connection; if it fails and left the connection or the
    /// publisher channel closed, reconnects and runs it once more.
    async fn with_link<T, F, Fut>(&self, what: &'static str, op: F) -> BusResult<T>
    where
        F: Fn(Arc<Link>) -> Fut,
        Fut: Future<Output = lapin::Result<T>>,
    {
        let link = self.current();
        let error = match op(Arc::clone(&link)).await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if link.is_open() {
            return Err(classify(what, error));
        }
        tracing::warn!(error = %error, "lost the broker connection, reconnecting");
        let link = self.reconnect(&link).await?;
        op(link).await.map_err(|error| classify(what, error))
    }

    /// Publishes on the confirm channel and waits for the broker's confirm. A nack is
    /// `Unavailable`; a `mandatory` message that no queue took is `Backend`.
    async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
        mandatory: bool,
    ) -> BusResult<()> {
        let confirmation = self
            .with_link("publish a message", |link| {
                let (exchange, routing_key) = (exchange.to_owned(), routing_key.to_owned());
                let properties = properties.clone();
                async move {
                    let options = BasicPublishOptions {
                        mandatory,
                        immediate: false,
                    };
                    link.publisher
                        .basic_publish(exchange.into(), routing_key.into(), options, body, properties)
                        .await?
                        .await
                }
            })
            .await?;
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) => Err(BusError::Backend(
                format!(
                    "broker returned message sent to {exchange} with key {routing_key}: {}",
                    returned.reply_text
                )
                .into(),
            )),
            Confirmation::Nack(_) => Err(BusError::Unavailable(
                format!("broker nacked message sent to {exchange} with key {routing_key}").into(),
            )),
            Confirmation::NotRequested => Err(BusError::Backend("publisher confirms are not enabled".into())),
        }
    }

    /// Declares (idempotently, once per connection) the delay queue of `routing_key` and
    /// `delay`: no consumer, a queue-wide TTL of `delay`, and on expiry the message goes to
    /// the events exchange with `routing_key`, as if published then. One TTL per queue means
    /// messages expire in order, never behind a longer delay. Returns the queue's name.
    async fn delay_queue(&self, routing_key: &str, delay: Duration) -> BusResult<String> {
        let millis = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX).max(1);
        let name = format!("{}.delay.{routing_key}.{millis}", self.settings.prefix);
        let link = self.current();
        if link
            .delay_queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&name)
        {
            return Ok(name);
        }
        let events = self.settings.events_exchange();
        let expires = self.settings.queue_expires;
        self.with_link("declare a delay queue", |link| {
            let (name, events, routing_key) = (name.clone(), events.clone(), routing_key.to_owned());
            async move {
                let mut arguments = FieldTable::default();
                arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(millis));
                arguments.insert("x-dead-letter-exchange".into(), long_string(&events));
                arguments.insert("x-dead-letter-routing-key".into(), long_string(&routing_key));
                if let Some(expires) = expires {
                    // Tests only (see `AmqpSettings::queue_expires`); must outlive the TTL.
                    let expires = i64::try_from(expires.as_millis()).unwrap_or(i64::MAX).max(millis * 2);
                    arguments.insert("x-expires".into(), AMQPValue::LongLongInt(expires));
                }
                let options = QueueDeclareOptions {
                    passive: false,
                    durable: true,
                    exclusive: false,
                    auto_delete: false,
                    nowait: false,
                };
                // A throwaway channel: a declare that conflicts closes its channel.
                let channel = link.connection.create_channel().await?;
                channel.queue_declare(name.as_str().into(), options, arguments).await?;
                let _ = channel.close(REPLY_SUCCESS, "OK".into()).await;
                link.delay_queues
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name);
                Ok(())
            }
        })
        .await?;
        Ok(name)
    }

    /// Ready messages in `queue`.
    async fn message_count(&self, queue: String) -> BusResult<u64> {
        let [(messages, _)] = self.queue_counts([queue]).await?;
        Ok(messages)
    }

    /// Ready messages and consumers of each queue, by passive declares on one throwaway
    /// channel (a missing queue closes the channel it was asked on, so never ask on the
    /// publisher's).
    async fn queue_counts<const N: usize>(&self, queues: [String; N]) -> BusResult<[(u64, u64); N]> {
        self.with_link("inspect a queue", |link| {
            let queues = queues.clone();
            async move {
                let channel = link.connection.create_channel().await?;
                let options = QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                };
                let mut counts = [(0, 0); N];
                for (queue, count) in queues.into_iter().zip(counts.iter_mut()) {
                    let declared = channel
                        .queue_declare(queue.into(), options, FieldTable::default())
                        .await?;
                    *count = (
                        u64::from(declared.message_count()),
                        u64::from(declared.consumer_count()),
                    );
                }
                let _ = channel.close(REPLY_SUCCESS, "OK".into()).await;
                Ok(counts)
            }
        })
        .await
    }
}

/// One connection and its publisher channel.
struct Link {
    connection: Connection,
    publisher: Channel,
    /// Delay queues declared on this connection (see `Shared::delay_queue`).
    delay_queues: Mutex<std::collections::HashSet<String>>,
}

impl Link {
    async fn open(settings: &AmqpSettings) -> BusResult<Link> {
        let uri: AMQPUri = settings.url.parse().map_err(|reason: String| {
            BusError::Backend(format!("invalid amqp url {}: {reason}", redact_password(&settings.url)).into())
        })?;
        let properties =
            ConnectionProperties::default().with_connection_name(format!("{APP_ID} {}", settings.prefix).into());
        let connection = tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect_uri(uri, properties))
            .await
            .map_err(|elapsed| BusError::Unavailable(Box::new(elapsed)))?
            .map_err(|e| classify("connect to the broker", e))?;
        let publisher = connection
            .create_channel()
            .await
            .map_err(|e| classify("open a channel", e))?;
        declare_topology(&publisher, settings)
            .await
            .map_err(|e| classify("declare the topology", e))?;
        publisher
            .confirm_select(ConfirmSelectOptions { nowait: false })
            .await
            .map_err(|e| classify("enable publisher confirms", e))?;
        Ok(Link {
            connection,
            publisher,
            delay_queues: Mutex::default(),
        })
    }

    fn is_open(&self) -> bool {
        self.connection.status().connected() && self.publisher.status().connected()
    }
}

/// Declares every exchange, queue and binding of `settings.prefix` (see the module doc).
/// Idempotent while the options below stay the same; changing one on a live broker fails with
/// PRECONDITION_FAILED until the old object is deleted by hand.
async fn declare_topology(channel: &Channel, settings: &AmqpSettings) -> lapin::Result<()> {
    let test_mode = settings.queue_expires.is_some();
    let exchange_options = ExchangeDeclareOptions {
        passive: false,         // create it if missing (passive would only check it exists)
        durable: true,          // survives a broker restart
        auto_delete: test_mode, // tests: goes away with its last binding, when test queues expire
        internal: false,        // clients publish to it directly
        nowait: false,          // wait for declare-ok, so a conflict fails here, at boot
    };
    let queue_options = QueueDeclareOptions {
        passive: false,     // create it if missing
        durable: true,      // survives a broker restart, with the persistent messages in it
        exclusive: false,   // shared by every replica of a worker
        auto_delete: false, // stays when the last consumer leaves: events published meanwhile wait
        nowait: false,      // wait for declare-ok, so a conflict fails here, at boot
    };
    // Queues are classic queues (the broker default): per-message TTL on the retry queues and
    // dead-lettering work on every supported RabbitMQ version.
    let queue_arguments = |dead_letter: Option<(&str, &str)>| {
        let mut arguments = FieldTable::default();
        if let Some((exchange, routing_key)) = dead_letter {
            // Where the broker sends a message that expires or is nacked without requeue.
            arguments.insert("x-dead-letter-exchange".into(), long_string(exchange));
            arguments.insert("x-dead-letter-routing-key".into(), long_string(routing_key));
        }
        if let Some(expires) = settings.queue_expires {
            // Tests only: delete the queue once it has had no consumer for this long.
            let millis = i64::try_from(expires.as_millis()).unwrap_or(i64::MAX).max(1);
            arguments.insert("x-expires".into(), AMQPValue::LongLongInt(millis));
        }
        arguments
    };

    let events = settings.events_exchange();
    let retry = settings.retry_exchange();
    let parked = settings.parked_exchange();
    // Every event goes here, routed by `Event::routing_key`.
    channel
        .exchange_declare(
            events.as_str().into(),
            ExchangeKind::Topic,
            exchange_options,
            FieldTable::default(),
        )
        .await?;
    // Retry copies, routed by kind to the kind's retry queue.
    channel
        .exchange_declare(
            retry.as_str().into(),
            ExchangeKind::Direct,
            exchange_options,
            FieldTable::default(),
        )
        .await?;
    // Parked messages, routed by kind to the kind's parked queue.
    channel
        .exchange_declare(
            parked.as_str().into(),
            ExchangeKind::Direct,
            exchange_options,
            FieldTable::default(),
        )
        .await?;

    for &kind in WorkerKind::ALL {
        let work_queue = settings.work_queue(kind);
        let retry_queue = settings.retry_queue(kind);
        let parked_queue = settings.parked_queue(kind);
        let bind = QueueBindOptions { nowait: false };

        // Parked: no consumer, no TTL; a human inspects it, or replays it (`replay_parked`).
        channel
            .queue_declare(parked_queue.as_str().into(), queue_options, queue_arguments(None))
            .await?;
        channel
            .queue_bind(
                parked_queue.into(),
                parked.as_str().into(),
                kind.as_str().into(),
                bind,
                FieldTable::default(),
            )
            .await?;

        // Retry: no consumer; each message carries its backoff as `expiration`, then goes
        // through the default exchange ("") to the work queue, named by its routing key.
        let back_to_work = queue_arguments(Some(("", &work_queue)));
        channel
            .queue_declare(retry_queue.as_str().into(), queue_options, back_to_work)
            .await?;
        channel
            .queue_bind(
                retry_queue.into(),
                retry.as_str().into(),
                kind.as_str().into(),
                bind,
                FieldTable::default(),
            )
            .await?;

        // Work: what the workers consume; a nack without requeue parks the message.
        let to_parked = queue_arguments(Some((&parked, kind.as_str())));
        channel
            .queue_declare(work_queue.as_str().into(), queue_options, to_parked)
            .await?;
        for routing_key in kind.routing_keys() {
            if settings.muted.contains(&kind) {
                // RabbitMQ answers unbind-ok for a binding that does not exist.
                channel
                    .queue_unbind(
                        work_queue.as_str().into(),
                        events.as_str().into(),
                        (*routing_key).into(),
                        FieldTable::default(),
                    )
                    .await?;
            } else {
                channel
                    .queue_bind(
                        work_queue.as_str().into(),
                        events.as_str().into(),
                        (*routing_key).into(),
                        bind,
                        FieldTable::default(),
                    )
                    .await?;
            }
        }
    }
    Ok(())
}

/// What an AMQP [`Delivery`] carries: the raw message (to ack it, or to copy it to the retry
/// or parked path) and the subscription whose channel it came on.
#[derive(Debug)]
pub(crate) struct AmqpToken {
    subscription: u64,
    delivery: Box<lapin::message::Delivery>,
}

struct AmqpSubscription {
    shared: Arc<Shared>,
    kind: WorkerKind,
    id: u64,
    /// Kept for `basic_cancel`; dropping the subscription closes it, which requeues whatever
    /// was delivered and not settled.
    channel: Channel,
    consumer: Consumer,
    cancelled: bool,
}

impl AmqpSubscription {
    fn delivery(&self, raw: lapin::message::Delivery) -> Delivery {
        let message_id = message_id_of(&raw.properties);
        let attempt = header_u32(raw.properties.headers(), HEADER_ATTEMPT).unwrap_or(1).max(1);
        let headers = raw.properties.headers();
        let trace = TraceContext::from_headers(
            header_str(headers, TRACEPARENT).as_deref(),
            header_str(headers, TRACESTATE).as_deref(),
        );
        Delivery {
            event: serde_json::from_slice::<Event>(&raw.data).map_err(|e| e.to_string()),
            message_id,
            attempt,
            trace,
            token: DeliveryToken::Amqp(AmqpToken {
                subscription: self.id,
                delivery: Box::new(raw),
            }),
        }
    }

    /// Publishes the copy of `delivery` that `outcome` calls for, if any.
    async fn copy(&self, delivery: &Delivery, raw: &lapin::message::Delivery, outcome: Outcome) -> BusResult<()> {
        let settings = &self.shared.settings;
        let parked_reason = match outcome {
            Outcome::Ack => return Ok(()),
            Outcome::Reject => PARKED_REJECTED,
            Outcome::Retry if delivery.attempt >= settings.attempts() => PARKED_EXHAUSTED,
            Outcome::Defer if delivery.attempt >= settings.attempts() => {
                tracing::info!(
                    queue = %settings.work_queue(self.kind),
                    message_id = %delivery.message_id,
                    attempt = delivery.attempt,
                    "attempts used up; the sweep redoes the work"
                );
                return Ok(());
            }
            Outcome::Retry | Outcome::Defer => {
                let delay = retry_backoff(settings.retry_delay, delivery.attempt);
                let millis = delay.as_millis().max(1);
                let properties = copy_properties(&delivery.message_id, &raw.properties, delivery.attempt + 1, None)
                    .with_expiration(millis.to_string().into());
                let exchange = settings.retry_exchange();
                return self
                    .shared
                    .publish(&exchange, self.kind.as_str(), &raw.data, properties, true)
                    .await;
            }
        };
        let properties = copy_properties(
            &delivery.message_id,
            &raw.properties,
            delivery.attempt,
            Some(parked_reason),
        );
        let exchange = settings.parked_exchange();
        self.shared
            .publish(&exchange, self.kind.as_str(), &raw.data, properties, true)
            .await?;
        tracing::warn!(
            queue = %settings.work_queue(self.kind),
            message_id = %delivery.message_id,
            attempt = delivery.attempt,
            reason = parked_reason,
            "parked message"
        );
        Ok(())
    }
}

#[async_trait]
impl Subscription for AmqpSubscription {
    async fn next(&mut self) -> Option<Delivery> {
        if self.cancelled {
            return None;
        }
        // Cancel-safe: the consumer is a stream; a dropped `next` leaves its buffer intact.
        match self.consumer.next().await? {
            Ok(raw) => Some(self.delivery(raw)),
            Err(error) => {
                // The stream ends after an error; the caller subscribes again.
                tracing::warn!(
                    queue = %self.shared.settings.work_queue(self.kind),
                    error = %error,
                    "consumer stopped"
                );
                self.cancelled = true;
                None
            }
        }
    }

    async fn settle(&mut self, delivery: Delivery, outcome: Outcome) -> BusResult<()> {
        let DeliveryToken::Amqp(token) = &delivery.token else {
            return Err(BusError::Backend("settled a delivery from another backend".into()));
        };
        if token.subscription != self.id {
            return Err(BusError::Backend("settled a delivery on another subscription".into()));
        }
        let raw = &token.delivery;
        if let Err(error) = self.copy(&delivery, raw, outcome).await {
            // Hand the message back at once rather than hold its prefetch slot until the
            // channel closes; it comes back with the same attempt.
            requeue(&raw.acker).await;
            return Err(error);
        }
        // Only now that any copy is confirmed: a crash before this line duplicates, never loses.
        match raw.acker.ack(BasicAckOptions { multiple: false }).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(BusError::Backend("delivery was already settled".into())),
            Err(error) => Err(classify("ack a delivery", error)),
        }
    }

    async fn cancel(&mut self) -> BusResult<()> {
        if std::mem::replace(&mut self.cancelled, true) || !self.channel.status().connected() {
            return Ok(());
        }
        self.channel
            .basic_cancel(self.consumer.tag(), BasicCancelOptions { nowait: false })
            .await
            .map_err(|error| classify("cancel a consumer", error))
    }
}

/// Properties of a fresh message: id, persistence and headers.
fn message_properties(message_id: &str, headers: FieldTable) -> BasicProperties {
    BasicProperties::default()
        .with_message_id(message_id.into())
        .with_delivery_mode(DELIVERY_MODE_PERSISTENT)
        .with_headers(headers)
}

/// A message's id; a message from outside sediment may have none, and gets one so that its
/// retry, parked and replayed copies can be traced.
fn message_id_of(properties: &BasicProperties) -> String {
    properties
        .message_id()
        .as_ref()
        .map(|id| id.as_str().to_owned())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// Returns an unsettled message to the head of its queue. Best effort: if the nack is lost,
/// closing the channel returns the message all the same.
async fn requeue(acker: &lapin::Acker) {
    let _ = acker
        .nack(BasicNackOptions {
            multiple: false,
            requeue: true,
        })
        .await;
}

/// Properties for a retry, parked or replayed copy: the original's, minus the broker's
/// dead-letter bookkeeping, any expiration and any earlier park reason, with the given attempt
/// (and park reason).
fn copy_properties(
    message_id: &str,
    original: &BasicProperties,
    attempt: u32,
    parked_reason: Option<&str>,
) -> BasicProperties {
    let mut headers: BTreeMap<ShortString, AMQPValue> = original
        .headers()
        .as_ref()
        .map(|headers| {
            headers
                .inner()
                .iter()
                .filter(|(key, _)| {
                    key.as_str() != HEADER_PARKED_REASON
                        && !BROKER_DEATH_HEADERS.iter().any(|p| key.as_str().starts_with(p))
                })
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect()
        })
        .unwrap_or_default();
    headers.insert(HEADER_ATTEMPT.into(), attempt_value(attempt));
    if let Some(reason) = parked_reason {
        headers.insert(HEADER_PARKED_REASON.into(), long_string(reason));
    }
    let mut properties = message_properties(message_id, headers.into());
    if let Some(content_type) = original.content_type() {
        properties = properties.with_content_type(content_type.clone());
    }
    if let Some(app_id) = original.app_id() {
        properties = properties.with_app_id(app_id.clone());
    }
    if let Some(timestamp) = original.timestamp() {
        properties = properties.with_timestamp(*timestamp);
    }
    properties
}

fn attempt_value(attempt: u32) -> AMQPValue {
    AMQPValue::LongInt(i32::try_from(attempt).unwrap_or(i32::MAX))
}

/// Reads a small non-negative integer header, whatever integer type the sender chose.
fn header_u32(headers: &Option<FieldTable>, key: &str) -> Option<u32> {
    let value = headers.as_ref()?.inner().get(key)?;
    let number = value
        .as_long_int()
        .map(i64::from)
        .or_else(|| value.as_long_long_int())
        .or_else(|| value.as_long_uint().map(i64::from))
        .or_else(|| value.as_short_int().map(i64::from))
        .or_else(|| value.as_short_uint().map(i64::from))
        .or_else(|| value.as_short_short_int().map(i64::from))
        .or_else(|| value.as_short_short_uint().map(i64::from))?;
    u32::try_from(number).ok()
}

/// Adds the W3C trace context headers, if there is a context. Retry and parked copies keep
/// them, as they keep every header but the broker's (see [`copy_properties`]).
fn insert_trace(headers: &mut FieldTable, trace: &TraceContext) {
    if let Some(traceparent) = &trace.traceparent {
        headers.insert(TRACEPARENT.into(), long_string(traceparent));
    }
    if let Some(tracestate) = &trace.tracestate {
        headers.insert(TRACESTATE.into(), long_string(tracestate));
    }
}

/// Reads a text header, as a long string (what sediment and most clients write) or a short one.
fn header_str(headers: &Option<FieldTable>, key: &str) -> Option<String> {
    let value = headers.as_ref()?.inner().get(key)?;
    if let Some(text) = value.as_long_string() {
        return std::str::from_utf8(text.as_bytes()).ok().map(str::to_owned);
    }
    value.as_short_string().map(|text| text.as_str().to_owned())
}

fn long_string(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A lapin error with the operation that failed, so the chain reads
/// "event bus unavailable: publish a message: IO error: ...".
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
struct AmqpError {
    what: &'static str,
    #[source]
    source: lapin::Error,
}

/// Sorts a lapin error into retryable (`Unavailable`: the connection, a channel or the broker
/// is down or busy) and permanent (`Backend`: a refused or malformed request, a topology
/// conflict, bad credentials) per STYLE R8.
fn classify(what: &'static str, source: lapin::Error) -> BusError {
    let permanent = matches!(
        source.kind(),
        ErrorKind::InvalidProtocolVersion(_)
            | ErrorKind::ParsingError(_)
            | ErrorKind::SerialisationError(_)
            | ErrorKind::AuthProviderError(_)
            | ErrorKind::FutureCompleted
            | ErrorKind::NoDefaultRuntime
    ) || matches!(source.kind(), ErrorKind::ProtocolError(error) if is_permanent(error.kind()));
    let error = Box::new(AmqpError { what, source });
    if permanent {
        BusError::Backend(error)
    } else {
        BusError::Unavailable(error)
    }
}

fn is_permanent(kind: &AMQPErrorKind) -> bool {
    matches!(
        kind,
        AMQPErrorKind::Soft(
            AMQPSoftError::ACCESSREFUSED
                | AMQPSoftError::NOTFOUND
                | AMQPSoftError::PRECONDITIONFAILED
                | AMQPSoftError::CONTENTTOOLARGE
        ) | AMQPErrorKind::Hard(
            AMQPHardError::INVALIDPATH
                | AMQPHardError::NOTALLOWED
                | AMQPHardError::NOTIMPLEMENTED
                | AMQPHardError::SYNTAXERROR
                | AMQPHardError::COMMANDINVALID
                | AMQPHardError::FRAMEERROR
                | AMQPHardError::UNEXPECTEDFRAME
        )
    )
}

/// `amqp://user:secret@host/` → `amqp://user:***@host/`, for logs and errors.
fn redact_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..].find('/').map_or(url.len(), |i| scheme_end + i);
    let Some(at) = url[scheme_end..authority_end].rfind('@').map(|i| scheme_end + i) else {
        return url.to_owned();
    };
    match url[scheme_end..at].find(':').map(|i| scheme_end + i) {
        Some(colon) => format!("{}:***{}", &url[..colon], &url[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_password("amqp://guest:secret@host:5672/%2f"),
            "amqp://guest:***@host:5672/%2f"
        );
        assert_eq!(redact_password("amqp://host:5672/%2f"), "amqp://host:5672/%2f");
        assert_eq!(redact_password("amqp://user@host/"), "amqp://user@host/");
    }

    #[test]
    fn attempt_header_reads_any_integer_type() {
        let mut headers = FieldTable::default();
        headers.insert(HEADER_ATTEMPT.into(), AMQPValue::LongLongInt(3));
        assert_eq!(header_u32(&Some(headers), HEADER_ATTEMPT), Some(3));
        let mut headers = FieldTable::default();
        headers.insert(HEADER_ATTEMPT.into(), attempt_value(4));
        assert_eq!(header_u32(&Some(headers), HEADER_ATTEMPT), Some(4));
        assert_eq!(header_u32(&None, HEADER_ATTEMPT), None);
    }

    #[test]
    fn queue_names_derive_from_the_prefix() {
        let settings = AmqpSettings {
            prefix: "p".into(),
            ..AmqpSettings::default()
        };
        assert_eq!(settings.work_queue(WorkerKind::Index), "p.index");
        assert_eq!(settings.retry_queue(WorkerKind::Index), "p.index.retry");
        assert_eq!(settings.parked_queue(WorkerKind::Index), "p.index.parked");
        assert_eq!(settings.events_exchange(), "p.events");
    }
}

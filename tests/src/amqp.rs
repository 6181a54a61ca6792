//! Per-test RabbitMQ resources. Each [`TestBroker`] owns a prefix no other test uses, so its
//! exchanges and queues are its own; they are deleted when the test ends ([`TestBroker::cleanup`]
//! or, if the test panicked, `Drop`), and the queues carry `x-expires` so that even a killed
//! test leaves nothing behind for long.
//!
//! The broker comes from `SEDIMENT_TEST_AMQP_URL` (default: local guest). An unreachable broker
//! fails the test with a message saying how to start one; it never skips.

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeleteOptions, QueueDeleteOptions,
};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use shared::bus::testsuite::Knobs;
use shared::bus::{AmqpBus, AmqpSettings, WorkerKind};
pub use shared::runtime::error_chain;

/// Environment variable naming the broker the tests use.
pub const AMQP_URL_ENV: &str = "SEDIMENT_TEST_AMQP_URL";
/// The broker used when [`AMQP_URL_ENV`] is not set.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Test queues delete themselves after this long without a consumer.
pub const QUEUE_EXPIRES: Duration = Duration::from_secs(600);

/// The broker URL for tests.
pub fn amqp_url() -> String {
    std::env::var(AMQP_URL_ENV).unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned())
}

/// A prefix unique to one test run of `test`, readable in the management UI:
/// `sediment-test.<test>.<random>`.
pub fn unique_prefix(test: &str) -> String {
    let test: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("sediment-test.{test}.{}", &random[..12])
}

/// One test's share of the broker: a unique prefix, the settings to build buses on it, and a
/// raw connection for what the bus API cannot do (publish garbage, peek at parked messages).
pub struct TestBroker {
    settings: AmqpSettings,
    raw: Channel,
    /// Kept so the raw channel stays open.
    _connection: Connection,
    cleaned: bool,
}

impl TestBroker {
    /// Claims a prefix for `test` with [`Knobs::default`]. Panics if the broker is unreachable.
    pub async fn start(test: &str) -> TestBroker {
        Self::with_knobs(test, Knobs::default()).await
    }

    /// Claims a prefix for `test`; buses built from it retry per `knobs`.
    pub async fn with_knobs(test: &str, knobs: Knobs) -> TestBroker {
        let settings = AmqpSettings {
            url: amqp_url(),
            prefix: unique_prefix(test),
            max_attempts: knobs.max_attempts,
            retry_delay: knobs.retry_delay,
            queue_expires: Some(QUEUE_EXPIRES),
            muted: Vec::new(),
        };
        let (connection, raw) = raw_channel(&settings.url).await;
        TestBroker {
            settings,
            raw,
            _connection: connection,
            cleaned: false,
        }
    }

    /// Settings for a bus on this test's prefix.
    pub fn settings(&self) -> AmqpSettings {
        self.settings.clone()
    }

    /// Connects a bus on this test's prefix (declaring its topology). Panics on failure.
    pub async fn bus(&self) -> AmqpBus {
        match AmqpBus::connect(self.settings()).await {
            Ok(bus) => bus,
            Err(e) => panic!(
                "connecting the event bus to {} failed: {}",
                self.settings.url,
                error_chain(&e)
            ),
        }
    }

    /// Publishes `body` as is to this test's events exchange, bypassing the bus (no message
    /// id, no headers), and waits for the broker's confirm.
    pub async fn publish_raw(&self, routing_key: &str, body: &[u8]) {
        let confirm = self
            .raw
            .basic_publish(
                self.settings.events_exchange().into(),
                routing_key.into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .expect("publish raw message")
            .await
            .expect("confirm raw message");
        assert!(confirm.is_ack(), "broker refused the raw message");
    }

    /// Puts `body` with `properties` straight into `queue` (default exchange), bypassing the bus:
    /// e.g. a parked message as an older sediment, or another client, left it.
    pub async fn publish_to_queue(&self, queue: &str, body: &[u8], properties: BasicProperties) {
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        let confirm = self
            .raw
            .basic_publish("".into(), queue.into(), options, body, properties)
            .await
            .expect("publish to a queue")
            .await
            .expect("confirm the message");
        assert!(
            matches!(confirm, lapin::Confirmation::Ack(None)),
            "the broker did not take the message into {queue}: {confirm:?}"
        );
    }

    /// Takes one message off `queue` (acking it), to inspect it; `None` if the queue is empty.
    pub async fn take(&self, queue: &str) -> Option<lapin::message::Delivery> {
        let message = self
            .raw
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap_or_else(|e| panic!("basic.get on {queue} failed: {e}"))?;
        Some(message.delivery)
    }

    /// Deletes one queue of this test's prefix, as an operator might by mistake.
    pub async fn delete_queue(&self, queue: &str) {
        self.raw
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("delete {queue}: {e}"));
    }

    /// Deletes every queue and exchange of this test's prefix.
    pub async fn cleanup(mut self) {
        self.cleaned = true;
        delete_topology(&self.settings).await;
    }
}

impl Drop for TestBroker {
    /// Runs when the test panicked before `cleanup`: deletes on a thread of its own, since the
    /// test's runtime may be gone or be the one blocked here.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let settings = self.settings.clone();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            if let Ok(runtime) = runtime {
                runtime.block_on(delete_topology(&settings));
            }
        });
        let _ = cleanup.join();
    }
}

/// Opens a connection and a confirm-mode channel, failing the test loudly if it cannot.
async fn raw_channel(url: &str) -> (Connection, Channel) {
    let connection = match tokio::time::timeout(
        Duration::from_secs(10),
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    {
        Ok(Ok(connection)) => connection,
        Ok(Err(e)) => panic!(
            "RabbitMQ is unreachable at {url} ({e}); start it (`rabbitmq-server -detached`) or set {AMQP_URL_ENV}"
        ),
        Err(_) => panic!("RabbitMQ at {url} did not answer within 10 s; check it or set {AMQP_URL_ENV}"),
    };
    let channel = connection.create_channel().await.expect("open a raw channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("enable publisher confirms");
    (connection, channel)
}

/// Best effort: a missing object or a failed delete is ignored (the queues expire anyway).
async fn delete_topology(settings: &AmqpSettings) {
    let Ok(connection) = Connection::connect(&settings.url, ConnectionProperties::default()).await else {
        return;
    };
    let mut queues = Vec::new();
    for &kind in WorkerKind::ALL {
        queues.extend([
            settings.work_queue(kind),
            settings.retry_queue(kind),
            settings.parked_queue(kind),
        ]);
    }
    let exchanges = [
        settings.events_exchange(),
        settings.retry_exchange(),
        settings.parked_exchange(),
    ];
    // A failed delete closes its channel, so each gets a channel of its own.
    for queue in queues {
        if let Ok(channel) = connection.create_channel().await {
            let _ = channel.queue_delete(queue.into(), QueueDeleteOptions::default()).await;
        }
    }
    for exchange in exchanges {
        if let Ok(channel) = connection.create_channel().await {
            let _ = channel
                .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
                .await;
        }
    }
    let _ = connection.close(200, "OK".into()).await;
}

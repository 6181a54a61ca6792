//! The S3 backend of the file store, for any S3-protocol server: AWS S3, MinIO, Tencent COS,
//! Ceph RGW. Path-style addressing (`{endpoint}/{bucket}/{key}`) by default, which every
//! S3-compatible server supports and which needs no wildcard DNS.
//!
//! Every key lives under the settings' root prefix, so several instances (or test runs) can
//! share one bucket without seeing each other. Objects are written with one PutObject each
//! (atomic in S3) and copied server side with CopyObject. Requests go through the SDK's
//! standard retry (3 attempts, exponential backoff with jitter) inside an overall timeout.
//!
//! Checksums are computed only where the protocol requires them: the SDK's newer default
//! (a CRC32 trailer on every upload) is refused by several S3-compatible servers. Deletes of
//! many objects are single DeleteObject calls, a few at a time, rather than DeleteObjects
//! (which requires a checksum header and is missing from some compatible servers); our folders
//! hold tens of objects, not millions.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use futures::stream::{self, StreamExt as _, TryStreamExt as _};

use super::{
    observe, validate_key, validate_prefix, validate_prefix_pair, FileError, FileResult, FileStore, ObjectMeta,
};
use crate::config::Secret;

const BACKEND: &str = "s3";
/// Requests in flight at once for the per-object calls of copies and deletes of a folder.
const CONCURRENCY: usize = 16;
/// The S3 default: regions other than this one must be named when creating a bucket.
const DEFAULT_REGION: &str = "us-east-1";

/// A static access key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
}

/// Where and how to reach the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    pub bucket: String,
    /// The server's URL (`http://minio:9000`, `https://cos.ap-beijing.myqcloud.com`); `None`
    /// is AWS S3 itself, found from the region.
    pub endpoint: Option<String>,
    pub region: String,
    /// Path-style addressing, `{endpoint}/{bucket}/{key}`; virtual-hosted style otherwise.
    pub force_path_style: bool,
    /// `None` reads the standard `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
    /// `AWS_SESSION_TOKEN` variables when the store is built.
    pub credentials: Option<S3Credentials>,
    /// Prefix of every key in the bucket: empty, or a folder ending with `/`.
    pub root_prefix: String,
    /// Longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Longest time one call may take, retries included.
    pub operation_timeout: Duration,
}

impl S3Settings {
    /// Settings for `bucket` with the defaults: AWS endpoint, `us-east-1`, path style, no root
    /// prefix, 5 s to connect and 30 s per call.
    pub fn new(bucket: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            endpoint: None,
            region: DEFAULT_REGION.to_owned(),
            force_path_style: true,
            credentials: None,
            root_prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            operation_timeout: Duration::from_secs(30),
        }
    }
}

/// A file store in an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3FileStore {
    client: Client,
    bucket: String,
    root: String,
}

/// A failed S3 request, with the operation and object it was for.
#[derive(Debug, thiserror::Error)]
#[error("s3 {op} of {target}")]
struct S3Failure {
    op: &'static str,
    /// `"key" in bucket b`, or `bucket b`.
    target: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// Whether an SDK error may go away by itself: no answer (refused, reset, timed out), an
/// unparseable answer (a connection cut mid-response), a 5xx or a throttling answer.
fn is_transient<E: ProvideErrorMetadata>(error: &SdkError<E>) -> bool {
    if matches!(error, SdkError::TimeoutError(_) | SdkError::ResponseError(_)) {
        return true;
    }
    if let SdkError::DispatchFailure(failure) = error {
        // A "user" failure is a request the client cannot send at all (a malformed URL).
        return !failure.is_user();
    }
    let status = error.raw_response().map(|response| response.status().as_u16());
    let throttled = matches!(
        error.code(),
        Some(
            "SlowDown"
                | "Throttling"
                | "ThrottlingException"
                | "RequestTimeout"
                | "ServiceUnavailable"
                | "InternalError"
        )
    );
    throttled || status.is_some_and(|status| status >= 500 || status == 429 || status == 408)
}

impl S3FileStore {
    /// Builds a client for the bucket. Opens no connection: [`FileStore::check`] does.
    pub fn new(settings: &S3Settings) -> FileResult<Self> {
        let root = settings.root_prefix.clone();
        if !root.is_empty() {
            validate_prefix(&root, false)?;
        }
        let credentials = match &settings.credentials {
            Some(c) => Credentials::new(
                &c.access_key_id,
                c.secret_access_key.expose(),
                None,
                None,
                "sediment-settings",
            ),
            None => credentials_from_aws_env()?,
        };
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(settings.connect_timeout)
            .operation_timeout(settings.operation_timeout)
            // So that one hung attempt leaves time for the retries.
            .operation_attempt_timeout(settings.operation_timeout / 3)
            .build();
        let mut config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(settings.region.clone()))
            .credentials_provider(credentials)
            .force_path_style(settings.force_path_style)
            .retry_config(RetryConfig::standard())
            .timeout_config(timeouts)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(endpoint) = &settings.endpoint {
            config = config.endpoint_url(endpoint);
        }
        Ok(Self {
            client: Client::from_conf(config.build()),
            bucket: settings.bucket.clone(),
            root,
        })
    }

    /// The key in the bucket of a store key or prefix.
    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.root)
    }

    fn target(&self, key: &str) -> String {
        format!("{key:?} in bucket {}", self.bucket)
    }

    fn failure<E>(&self, op: &'static str, key: &str, error: SdkError<E>) -> FileError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.bucket_failure(op, self.target(key), error)
    }

    fn bucket_failure<E>(&self, op: &'static str, target: String, error: SdkError<E>) -> FileError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let transient = is_transient(&error);
        let failure = Box::new(S3Failure {
            op,
            target,
            source: Box::new(error),
        });
        if transient {
            FileError::Unavailable(failure)
        } else {
            FileError::Backend(failure)
        }
    }

    async fn put_object(&self, key: &str, body: Vec<u8>) -> FileResult<()> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.full(key))
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| self.failure("put", key, e))?;
        Ok(())
    }

    async fn get_object(&self, key: &str) -> FileResult<Option<Vec<u8>>> {
        let response = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.full(key))
            .send()
            .await;
        let output = match response {
            Ok(output) => output,
            Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_key()) => return Ok(None),
            Err(e) => return Err(self.failure("get", key, e)),
        };
        let body = output.body.collect().await.map_err(|e| {
            FileError::Unavailable(Box::new(S3Failure {
                op: "read body",
                target: self.target(key),
                source: Box::new(e),
            }))
        })?;
        Ok(Some(body.into_bytes().to_vec()))
    }

    async fn list_objects(&self, prefix: &str) -> FileResult<Vec<ObjectMeta>> {
        let mut found = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(self.full(prefix))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| self.failure("list", prefix, e))?;
            for object in page.contents() {
                let Some(key) = object.key().and_then(|key| key.strip_prefix(&self.root)) else {
                    continue;
                };
                // Folder markers (`a/`) that consoles create, and names we could never have
                // written, are not objects of this store.
                if validate_key(key).is_err() {
                    tracing::debug!(key, "skipping an S3 key that is not a valid file key");
                    continue;
                }
                found.push(ObjectMeta {
                    key: key.to_owned(),
                    size: object.size().and_then(|size| u64::try_from(size).ok()).unwrap_or(0),
                });
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_owned()),
                _ if page.is_truncated() == Some(true) => {
                    // Asking for the first page again would loop forever.
                    return Err(FileError::Backend(
                        format!("s3 list of {prefix:?}: truncated page without a continuation token").into(),
                    ));
                }
                _ => break,
            }
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    async fn delete_object(&self, key: &str) -> FileResult<()> {
        // S3 answers 204 for a key that does not exist: idempotent without a lookup.
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(self.full(key))
            .send()
            .await
            .map_err(|e| self.failure("delete", key, e))?;
        Ok(())
    }

    /// Copies one object server side; `false` when the source is gone.
    async fn copy_object(&self, from: &str, to: &str) -> FileResult<bool> {
        let source = format!("{}/{}", self.bucket, encode_copy_source(&self.full(from)));
        let response = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .copy_source(source)
            .key(self.full(to))
            .send()
            .await;
        match response {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("NoSuchKey") => Ok(false),
            Err(e) => Err(self.failure("copy", from, e)),
        }
    }

    /// Creates the bucket unless it exists. Safe when several callers race.
    #[cfg(any(test, feature = "testing"))]
    pub async fn create_bucket(&self) -> FileResult<()> {
        use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
        let mut request = self.client.create_bucket().bucket(&self.bucket);
        let region = self.client.config().region().map(|region| region.as_ref().to_owned());
        if let Some(region) = region.filter(|region| region != DEFAULT_REGION) {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region.as_str()))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_bucket_already_owned_by_you() || e.is_bucket_already_exists()) =>
            {
                Ok(())
            }
            Err(e) => Err(self.bucket_failure("create", format!("bucket {}", self.bucket), e)),
        }
    }
}

/// Reads the standard AWS credential variables, for deployments that set those rather than
/// sediment's own.
fn credentials_from_aws_env() -> FileResult<Credentials> {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.trim().is_empty());
    match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Ok(Credentials::new(
            id,
            secret,
            var("AWS_SESSION_TOKEN"),
            None,
            "aws-environment",
        )),
        _ => Err(FileError::Backend(
            "no S3 credentials: set SEDIMENT_S3_ACCESS_KEY_ID and SEDIMENT_S3_SECRET_ACCESS_KEY \
             (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
                .into(),
        )),
    }
}

/// Percent-encodes a key for CopyObject's `x-amz-copy-source` header, which S3 URL-decodes.
/// Keeps `/` and the RFC 3986 unreserved characters; everything else (spaces, `+`, CJK)
/// is escaped byte by byte.
fn encode_copy_source(key: &str) -> String {
    let mut encoded = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b'/') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[async_trait]
impl FileStore for S3FileStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn put(&self, key: &str, body: Vec<u8>) -> FileResult<()> {
        observe(BACKEND, "put", async {
            validate_key(key)?;
            self.put_object(key, body).await
        })
        .await
    }

    async fn get(&self, key: &str) -> FileResult<Option<Vec<u8>>> {
        observe(BACKEND, "get", async {
            validate_key(key)?;
            self.get_object(key).await
        })
        .await
    }

    async fn list(&self, prefix: &str) -> FileResult<Vec<ObjectMeta>> {
        observe(BACKEND, "list", async {
            validate_prefix(prefix, true)?;
            self.list_objects(prefix).await
        })
        .await
    }

    async fn delete(&self, key: &str) -> FileResult<()> {
        observe(BACKEND, "delete", async {
            validate_key(key)?;
            self.delete_object(key).await
        })
        .await
    }

    async fn delete_prefix(&self, prefix: &str) -> FileResult<usize> {
        observe(BACKEND, "delete_prefix", async {
            validate_prefix(prefix, false)?;
            let keys: Vec<String> = self.list_objects(prefix).await?.into_iter().map(|o| o.key).collect();
            let count = keys.len();
            // Owned keys: a closure borrowing from the listing trips the Send check of the
            // boxed future ("FnOnce is not general enough").
            stream::iter(keys)
                .map(|key| async move { self.delete_object(&key).await })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await?;
            Ok(count)
        })
        .await
    }

    async fn copy_prefix(&self, from: &str, to: &str) -> FileResult<usize> {
        observe(BACKEND, "copy_prefix", async {
            validate_prefix_pair(from, to)?;
            let pairs: Vec<(String, String)> = self
                .list_objects(from)
                .await?
                .into_iter()
                .map(|object| {
                    let relative = object.key.strip_prefix(from).unwrap_or(&object.key);
                    let target = format!("{to}{relative}");
                    (object.key, target)
                })
                .collect();
            let copied: Vec<bool> = stream::iter(pairs)
                .map(|(source, target)| async move { self.copy_object(&source, &target).await })
                .buffer_unordered(CONCURRENCY)
                .try_collect()
                .await?;
            Ok(copied.into_iter().filter(|copied| *copied).count())
        })
        .await
    }

    async fn check(&self) -> FileResult<()> {
        observe(BACKEND, "check", async {
            self.client
                .head_bucket()
                .bucket(&self.bucket)
                .send()
                .await
                .map_err(|e| self.bucket_failure("check", format!("bucket {}", self.bucket), e))?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_sources_are_percent_encoded() {
        assert_eq!(encode_copy_source("a/b-c_d.e~f.md"), "a/b-c_d.e~f.md");
        assert_eq!(encode_copy_source("场/a b+c"), "%E5%9C%BA/a%20b%2Bc");
    }

    #[test]
    fn a_root_prefix_must_be_a_folder() {
        let mut settings = S3Settings::new("bucket");
        settings.credentials = Some(S3Credentials {
            access_key_id: "id".into(),
            secret_access_key: Secret::new("secret"),
        });
        settings.root_prefix = "tenant-a".into();
        assert!(matches!(S3FileStore::new(&settings), Err(FileError::InvalidKey(_))));
        settings.root_prefix = "tenant-a/".into();
        assert_eq!(S3FileStore::new(&settings).unwrap().full("x.md"), "tenant-a/x.md");
    }
}

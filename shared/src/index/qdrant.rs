//! The cluster `SearchIndex` backend: one collection on a Qdrant server, over gRPC
//! (`qdrant-client`).
//!
//! It keeps the contract of [`SearchIndex`] with the point schema of the embedded backend
//! (`edge`), so that the two are interchangeable:
//! - a sparse vector `bm25` with the IDF modifier;
//! - a dense vector `dense` (cosine) of the embedder's dimension, when one is configured; an
//!   existing collection with another dimension is refused at `connect`;
//! - payload `scope` (tenant and kind), `session_id`, `tags` and `task`, each with a keyword
//!   index;
//! - the point id is the item's own UUID, so indexing twice overwrites.
//!
//! The sparse vectors are computed here, client side, by the same BM25 model as edge's
//! ([`Bm25`]); the server only applies IDF over the collection at query time. So a query scores
//! alike on both backends, and the server needs no inference of its own.
//!
//! `connect` creates the collection and the payload indexes when they are missing (idempotent,
//! safe when several processes start at once) and checks that an existing collection has the
//! `bm25` vector with the IDF modifier.
//!
//! A collection records the text analysis and payload layout its points were made with
//! (`index_version`), in the collection's metadata (`sediment_index_version`, which needs
//! Qdrant 1.16 or later). `connect` refuses a collection that records another version, or none
//! (made by an older sediment), since its keyword vectors or filters would not match what
//! queries compute. Unlike an Edge shard, which one process owns and rebuilds by itself, a
//! server collection is shared by every replica and worker, so dropping it is left to the
//! operator; sediment then creates it afresh and re-indexes every stored turn.
//!
//! Writes (`upsert`, `delete`) pass `wait=true`: they return
//! once the server has applied them, visible to `search` and `count`.
//!
//! Errors: a refused or lost connection, a timeout, an overloaded or unavailable server are
//! [`IndexError::Unavailable`] (retryable); anything else the server rejects is
//! [`IndexError::Backend`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::r#match::MatchValue;
use qdrant_client::qdrant::{
    vectors_config, Distance, PrefetchQueryBuilder, RrfBuilder, ScrollPointsBuilder, VectorParamsBuilder,
    VectorsConfigBuilder,
};
use qdrant_client::qdrant::{
    Condition, CountPointsBuilder, CreateCollectionBuilder, CreateFieldIndexCollectionBuilder, DeletePointsBuilder,
    FieldType, Filter, Modifier, NamedVectors, PointId, PointStruct, PointsIdsList, Query, QueryPointsBuilder,
    RepeatedStrings, SparseVectorParamsBuilder, SparseVectorsConfigBuilder, UpsertPointsBuilder, Vector, VectorInput,
};
use qdrant_client::{Payload, Qdrant, QdrantError};
use tonic::Code;
use uuid::Uuid;

use super::{
    check_dense, index_version, payload_terms, scope_terms, Bm25, IndexError, IndexHit, IndexPoint, IndexQuery,
    IndexResult, PayloadValue, Plan, PointKind, Ranking, SearchIndex, SparseVector, BM25_VECTOR, DENSE_VECTOR,
    KEYWORD_FIELDS, TAGS,
};
use crate::domain::Tenant;

/// Deadline of one request, including a `wait=true` write of a large batch.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline for opening the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How `qdrant-client` words a failed connect, which it reports as `Internal`.
const CONNECT_FAILED: &str = "Failed to connect to";
/// How tonic words a broken connection, which it reports as `Unknown`.
const TRANSPORT_ERROR: &str = "transport error";
/// The collection metadata key that records `index_version`.
pub const INDEX_VERSION_KEY: &str = "sediment_index_version";

/// The Qdrant-server implementation of [`SearchIndex`].
pub struct QdrantIndex {
    client: Qdrant,
    url: String,
    collection: String,
    bm25: Arc<Bm25>,
    dense_dimension: Option<usize>,
    /// Whether `connect` created the collection.
    created: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for QdrantIndex {
    /// Leaves out the client, whose config holds the API key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantIndex")
            .field("url", &self.url)
            .field("collection", &self.collection)
            .finish_non_exhaustive()
    }
}

impl QdrantIndex {
    /// Connects to the server at `url` (the gRPC port, usually 6334), creates `collection` and
    /// its payload indexes if missing, and checks an existing collection's vectors: the `bm25`
    /// sparse vector, and a `dense` vector of `dense_dimension` when that is set.
    ///
    /// Fails with a retryable error when the server cannot be reached.
    pub async fn connect(
        url: &str,
        collection: &str,
        api_key: Option<String>,
        dense_dimension: Option<usize>,
    ) -> IndexResult<Self> {
        let client = Qdrant::from_url(url)
            .api_key(api_key)
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            // The check blocks a thread on a runtime of its own and prints to stdout.
            .skip_compatibility_check()
            .build()
            .map_err(classify)?;
        let index = Self {
            client,
            url: url.to_owned(),
            collection: collection.to_owned(),
            bm25: Arc::new(Bm25::new()),
            dense_dimension,
            created: std::sync::atomic::AtomicBool::new(false),
        };
        index.ensure_collection().await?;
        index.ensure_payload_indexes().await?;
        Ok(index)
    }

    /// Deletes the collection and everything in it. For tests.
    #[cfg(feature = "testing")]
    pub async fn drop_collection(&self) -> IndexResult<()> {
        self.client
            .delete_collection(qdrant_client::qdrant::DeleteCollectionBuilder::new(&self.collection))
            .await
            .map_err(classify)?;
        Ok(())
    }

    async fn ensure_collection(&self) -> IndexResult<()> {
        if !self.collection_exists().await? {
            let mut sparse = SparseVectorsConfigBuilder::default();
            sparse.add_named_vector_params(
                BM25_VECTOR,
                SparseVectorParamsBuilder::default().modifier(Modifier::Idf),
            );
            let mut create = CreateCollectionBuilder::new(&self.collection).sparse_vectors_config(sparse);
            if let Some(size) = self.dense_dimension {
                let mut dense = VectorsConfigBuilder::default();
                dense.add_named_vector_params(DENSE_VECTOR, VectorParamsBuilder::new(size as u64, Distance::Cosine));
                create = create.vectors_config(dense);
            }
            // Set on the request itself: the builder's `metadata` takes serde_json values only
            // with qdrant-client's `serde` feature.
            let mut create = create.build();
            create.metadata = index_version_metadata(&index_version());
            match self.client.create_collection(create).await {
                Ok(_) => {
                    self.created.store(true, std::sync::atomic::Ordering::Release);
                    tracing::info!(collection = %self.collection, "created qdrant collection");
                }
                // Another process may have created it since we looked.
                Err(e) => {
                    if !self.collection_exists().await? {
                        return Err(classify(e));
                    }
                }
            }
        }
        self.check_collection().await
    }

    /// Records another index version for the collection, as another build would have. For
    /// tests.
    #[cfg(feature = "testing")]
    pub async fn record_other_index_version(&self, version: &str) -> IndexResult<()> {
        let mut update = qdrant_client::qdrant::UpdateCollectionBuilder::new(&self.collection).build();
        update.metadata = index_version_metadata(version);
        self.client.update_collection(update).await.map_err(classify)?;
        Ok(())
    }

    async fn collection_exists(&self) -> IndexResult<bool> {
        self.client.collection_exists(&self.collection).await.map_err(classify)
    }

    /// Checks that the collection was made with this build's index version, that it has the
    /// `bm25` sparse vector with the IDF modifier and, when an embedder is configured, a `dense`
    /// vector of its dimension.
    async fn check_collection(&self) -> IndexResult<()> {
        let info = self.client.collection_info(&self.collection).await.map_err(classify)?;
        let config = info.result.and_then(|info| info.config);
        let recorded = config
            .as_ref()
            .and_then(|config| config.metadata.get(INDEX_VERSION_KEY))
            .map(|value| value.as_str().map_or_else(|| format!("{value:?}"), ToOwned::to_owned));
        check_index_version(&self.collection, recorded.as_deref())?;
        let params = config.and_then(|config| config.params);
        let modifier = params
            .as_ref()
            .and_then(|params| params.sparse_vectors_config.as_ref())
            .and_then(|sparse| sparse.map.get(BM25_VECTOR).cloned())
            .and_then(|params| params.modifier);
        if modifier != Some(Modifier::Idf as i32) {
            return Err(IndexError::Backend(
                format!(
                    "qdrant collection {:?} has no sparse vector {BM25_VECTOR:?} with the idf modifier",
                    self.collection
                )
                .into(),
            ));
        }
        let Some(wanted) = self.dense_dimension else {
            return Ok(());
        };
        let found = params
            .and_then(|params| params.vectors_config)
            .and_then(|config| config.config)
            .and_then(|config| match config {
                vectors_config::Config::ParamsMap(map) => map.map.get(DENSE_VECTOR).map(|p| p.size),
                vectors_config::Config::Params(_) => None,
            });
        if found == Some(wanted as u64) {
            return Ok(());
        }
        Err(IndexError::Backend(
            format!(
                "qdrant collection {:?} holds {} but the embedder gives {wanted}-dimensional vectors; \
                 use another collection (SEDIMENT_QDRANT_COLLECTION) or rebuild this one",
                self.collection,
                match found {
                    Some(found) => format!("{found}-dimensional dense vectors"),
                    None => "no dense vector".to_owned(),
                }
            )
            .into(),
        ))
    }

    /// Creates the keyword payload indexes; the server accepts an index that already exists.
    async fn ensure_payload_indexes(&self) -> IndexResult<()> {
        for field in KEYWORD_FIELDS {
            let create = CreateFieldIndexCollectionBuilder::new(&self.collection, field, FieldType::Keyword).wait(true);
            self.client.create_field_index(create).await.map_err(classify)?;
        }
        Ok(())
    }

    /// Runs BM25 (CPU work: tokenization, jieba for Chinese) off the async threads.
    async fn embed<T, F>(&self, f: F) -> IndexResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Bm25) -> T + Send + 'static,
    {
        let bm25 = Arc::clone(&self.bm25);
        tokio::task::spawn_blocking(move || f(&bm25))
            .await
            .map_err(|e| IndexError::Backend(Box::new(e)))
    }
}

#[async_trait]
impl SearchIndex for QdrantIndex {
    async fn upsert(&self, points: &[IndexPoint]) -> IndexResult<()> {
        if points.is_empty() {
            return Ok(());
        }
        for point in points {
            if let Some(dense) = &point.dense {
                check_dense(dense, self.dense_dimension)?;
            }
        }
        let points = points.to_vec();
        let points = self
            .embed(move |bm25| {
                points
                    .iter()
                    .map(|point| point_struct(point, bm25.embed_document(&point.text)))
                    .collect::<Vec<_>>()
            })
            .await?;
        let upsert = UpsertPointsBuilder::new(&self.collection, points).wait(true);
        self.client.upsert_points(upsert).await.map_err(classify)?;
        Ok(())
    }

    async fn search(&self, query: &IndexQuery) -> IndexResult<Vec<IndexHit>> {
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        query.validate()?;
        let keyword = if query.uses_keyword() {
            let text = query.text.clone();
            Some(self.embed(move |bm25| bm25.embed_query(&text)).await?)
        } else {
            None
        };
        let ranking = |ranking: Ranking<'_>| match ranking {
            Ranking::Keyword(v) => (
                Query::new_nearest(VectorInput::new_sparse(v.indices, v.values)),
                BM25_VECTOR,
            ),
            Ranking::Semantic(dense) => (Query::new_nearest(VectorInput::new_dense(dense.to_vec())), DENSE_VECTOR),
        };
        let filter = tenant_filter(
            &query.tenant,
            query.kind,
            query.session_id.as_deref(),
            query.task.as_deref(),
        );
        let request = QueryPointsBuilder::new(&self.collection);
        let request = match query.plan(keyword, self.dense_dimension)? {
            Plan::Nothing => return Ok(Vec::new()),
            Plan::Direct(one) => {
                let (one, using) = ranking(one);
                request.query(one).using(using)
            }
            Plan::Fused {
                channels,
                rrf_k,
                weights,
            } => {
                let mut rrf = RrfBuilder::with_k(rrf_k as u32);
                if let Some(weights) = weights {
                    rrf = rrf.weights(weights);
                }
                channels
                    .into_iter()
                    .fold(request, |request, channel| {
                        let mut filter = filter.clone();
                        if !channel.tags.is_empty() {
                            filter.must.push(Condition::matches(
                                TAGS,
                                MatchValue::Keywords(RepeatedStrings {
                                    strings: channel.tags.to_vec(),
                                }),
                            ));
                        }
                        let (query, using) = ranking(channel.ranking);
                        request.add_prefetch(
                            PrefetchQueryBuilder::default()
                                .query(query)
                                .using(using)
                                .filter(filter)
                                .limit(channel.limit as u64),
                        )
                    })
                    .query(Query::new_rrf(rrf))
            }
        };
        let request = request
            .filter(filter)
            .limit(query.limit as u64)
            .with_payload(false)
            .with_vectors(false);
        let response = self.client.query(request).await.map_err(classify)?;
        response
            .result
            .into_iter()
            .map(|point| {
                Ok(IndexHit {
                    id: uuid_of(point.id)?,
                    score: point.score,
                })
            })
            .collect()
    }

    async fn delete(&self, ids: &[Uuid]) -> IndexResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids = PointsIdsList {
            ids: ids.iter().map(|id| PointId::from(id.to_string())).collect(),
        };
        let delete = DeletePointsBuilder::new(&self.collection).points(ids).wait(true);
        self.client.delete_points(delete).await.map_err(classify)?;
        Ok(())
    }

    async fn count(&self, tenant: &Tenant, kind: PointKind) -> IndexResult<u64> {
        let request = CountPointsBuilder::new(&self.collection)
            .filter(tenant_filter(tenant, kind, None, None))
            .exact(true);
        let response = self.client.count(request).await.map_err(classify)?;
        response
            .result
            .map(|result| result.count)
            .ok_or_else(|| IndexError::Backend("qdrant count response has no result".into()))
    }

    async fn scope_ids(
        &self,
        tenant: &Tenant,
        kind: PointKind,
        session_id: Option<&str>,
        task: Option<&str>,
        limit: usize,
    ) -> IndexResult<Vec<Uuid>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let request = ScrollPointsBuilder::new(&self.collection)
            .filter(tenant_filter(tenant, kind, session_id, task))
            .limit(limit as u32)
            .with_payload(false)
            .with_vectors(false);
        let response = self.client.scroll(request).await.map_err(classify)?;
        response.result.into_iter().map(|point| uuid_of(point.id)).collect()
    }

    fn dense_dimension(&self) -> Option<usize> {
        self.dense_dimension
    }

    fn created(&self) -> bool {
        self.created.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn ping(&self) -> IndexResult<()> {
        self.client.health_check().await.map_err(classify)?;
        Ok(())
    }
}

/// Collection metadata recording an index version.
fn index_version_metadata(version: &str) -> std::collections::HashMap<String, qdrant_client::qdrant::Value> {
    [(INDEX_VERSION_KEY.to_owned(), version.into())].into()
}

/// Accepts only a collection that records this build's index version (see the module docs).
fn check_index_version(collection: &str, recorded: Option<&str>) -> IndexResult<()> {
    let current = index_version();
    let found = match recorded {
        Some(found) if found == current => return Ok(()),
        Some(found) => format!("records index version {found:?}"),
        None => "records no index version (it was made by an older sediment, or the server is older \
                 than Qdrant 1.16, which keeps no collection metadata)"
            .to_owned(),
    };
    Err(IndexError::Backend(
        format!(
            "qdrant collection {collection:?} {found}; this build indexes with {current:?}, so its \
             keyword vectors or filters would not match queries. Delete the collection (sediment \
             creates it again and re-indexes every stored turn) or set SEDIMENT_QDRANT_COLLECTION to \
             a new name"
        )
        .into(),
    ))
}

fn point_struct(point: &IndexPoint, vector: SparseVector) -> PointStruct {
    let mut payload = Payload::with_capacity(KEYWORD_FIELDS.len());
    for (key, value) in payload_terms(point) {
        match value {
            PayloadValue::One(one) => payload.insert(key, one),
            PayloadValue::Many(many) => payload.insert(key, many),
        }
    }
    // An empty vector (no searchable token) is stored too; it is never matched.
    let mut vectors =
        NamedVectors::default().add_vector(BM25_VECTOR, Vector::new_sparse(vector.indices, vector.values));
    if let Some(dense) = &point.dense {
        vectors = vectors.add_vector(DENSE_VECTOR, Vector::new_dense(dense.clone()));
    }
    PointStruct::new(point.id.to_string(), vectors, payload)
}

/// Exact keyword matches on the tenant, the kind and, if given, the session and the task (as in
/// `edge`).
fn tenant_filter(tenant: &Tenant, kind: PointKind, session_id: Option<&str>, task: Option<&str>) -> Filter {
    // Spelled out: the client's `From<String>` turns a value with whitespace into a text match.
    let keyword = |key: &str, value: String| Condition::matches(key, MatchValue::Keyword(value));
    Filter::must(
        scope_terms(tenant, kind, session_id, task)
            .into_iter()
            .map(|(k, v)| keyword(k, v)),
    )
}

fn uuid_of(id: Option<PointId>) -> IndexResult<Uuid> {
    match id.and_then(|id| id.point_id_options) {
        Some(PointIdOptions::Uuid(text)) => Uuid::parse_str(&text).map_err(|e| IndexError::Backend(Box::new(e))),
        Some(PointIdOptions::Num(n)) => Err(IndexError::Backend(
            format!("qdrant collection holds a numeric point id {n}; only uuids are written").into(),
        )),
        None => Err(IndexError::Backend("qdrant returned a point without an id".into())),
    }
}

/// Sorts a client error into retryable (`Unavailable`) or not (`Backend`).
fn classify(error: QdrantError) -> IndexError {
    if is_transient(&error) {
        IndexError::Unavailable(Box::new(error))
    } else {
        IndexError::Backend(Box::new(error))
    }
}

fn is_transient(error: &QdrantError) -> bool {
    // Exhaustive on purpose: enabling a client feature that adds a variant (`serde`,
    // `download_snapshots`) must make someone classify it here.
    match error {
        QdrantError::ResponseError { status } => status_is_transient(status),
        QdrantError::ResourceExhaustedError { .. } | QdrantError::Io(_) => true,
        QdrantError::ConversionError(_) | QdrantError::InvalidUri(_) | QdrantError::NoSnapshotFound(_) => false,
    }
}

fn status_is_transient(status: &tonic::Status) -> bool {
    match status.code() {
        // `Cancelled` is also what tonic reports when the request timeout expires.
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::ResourceExhausted => true,
        Code::Internal => status.message().starts_with(CONNECT_FAILED),
        Code::Unknown => status.message().starts_with(TRANSPORT_ERROR),
        Code::Ok
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::DataLoss
        | Code::Unauthenticated => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{scope_value, SCOPE, SESSION_ID, TASK};

    #[test]
    fn a_collection_of_another_index_version_is_refused() {
        let current = index_version();
        assert!(check_index_version("c", Some(&current)).is_ok());
        for (recorded, says) in [
            (Some("text 3, payload 1"), "records index version \"text 3, payload 1\""),
            // Made by a build that recorded the text analysis alone, under another key.
            (None, "records no index version"),
        ] {
            let error = check_index_version("c", recorded).expect_err("another version");
            assert!(!error.is_retryable(), "{error:?}");
            let message = crate::runtime::error_chain(&error);
            assert!(message.contains(says), "{message}");
            assert!(message.contains("SEDIMENT_QDRANT_COLLECTION"), "{message}");
        }
        let metadata = index_version_metadata(&current);
        assert_eq!(
            metadata[INDEX_VERSION_KEY].as_str().map(String::as_str),
            Some(current.as_str())
        );
    }

    #[test]
    fn connection_failures_are_transient() {
        let refused = QdrantError::ResponseError {
            status: tonic::Status::internal("Failed to connect to http://127.0.0.1:1/: refused"),
        };
        assert!(is_transient(&refused));
        let down = QdrantError::ResponseError {
            status: tonic::Status::unavailable("connection refused"),
        };
        assert!(is_transient(&down));
        let timeout = QdrantError::ResponseError {
            status: tonic::Status::cancelled("Timeout expired"),
        };
        assert!(is_transient(&timeout));
    }

    #[test]
    fn rejections_are_permanent() {
        let bad = QdrantError::ResponseError {
            status: tonic::Status::invalid_argument("Wrong input: bad filter"),
        };
        assert!(!is_transient(&bad));
        let internal = QdrantError::ResponseError {
            status: tonic::Status::internal("service internal error"),
        };
        assert!(!is_transient(&internal));
        assert!(!is_transient(&QdrantError::ConversionError("x".to_owned())));
    }

    #[test]
    fn filter_matches_keywords_even_with_whitespace() {
        let tenant = Tenant {
            team: "team one".to_owned(),
            agent: "a".to_owned(),
            user: "u".to_owned(),
        };
        let filter = tenant_filter(&tenant, PointKind::Turn, Some("s 1"), Some("task one"));
        assert_eq!(
            filter.must,
            [
                Condition::matches(SCOPE, MatchValue::Keyword(scope_value(&tenant, PointKind::Turn))),
                Condition::matches(SESSION_ID, MatchValue::Keyword("s 1".to_owned())),
                Condition::matches(TASK, MatchValue::Keyword("task one".to_owned())),
            ]
        );
        assert!(scope_value(&tenant, PointKind::Turn).contains("team one"));
    }
}

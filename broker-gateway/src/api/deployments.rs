//! `/v1/deployments`: create (queue for the agent) and read, with an optional long poll.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use flue_proto::heat::{self, InputType};
use flue_proto::limits::check_input_values;
use flue_proto::poll::Transport;
use flue_proto::seal;
use flue_proto::{
    Action, Config, CreateDeployment, Deployment, DeploymentId, DeploymentStatus, IdError,
    ServerId, StackId,
};
use futures_util::StreamExt;
use serde::Deserialize;
use time::OffsetDateTime;
use tracing::{info, warn};

use super::error::ApiError;
use super::extract::{JsonBody, PathId, PathIdKind, inner_text};
use super::listing::{Listed, Paged, Pages, page_limit};
use super::poll;
use super::references;
use crate::config::MAX_TIMEOUT_SECS;
use crate::error::chain;
use crate::record::{
    DeploymentRecord, hidden_inputs, hidden_outputs, hidden_union, same_config_content,
    same_request, timeout_deadline, with_defaults,
};
use crate::sealing::{opened_inputs, opened_values, seal_at_rest};
use crate::service::{Service, request};
use crate::store::Listing;
use crate::store::deployment_key;
use crate::waiters::{Waiters, Wake};

/// The values as the agent hands them to the hook (`flue_proto::heat`): each read as its
/// declared type (an undeclared one is a `String`), then a `String`'s made text. A value
/// that cannot be its declared type is refused (422 naming the field, never the value,
/// which may be hidden), as Heat refuses a parameter that is not its type.
fn as_declared(
    config: &Config,
    values: &BTreeMap<String, serde_json::Value>,
    field: impl Fn(&str) -> String,
) -> Result<BTreeMap<String, serde_json::Value>, ApiError> {
    values
        .iter()
        .map(|(name, value)| {
            let kind = config
                .inputs
                .iter()
                .find(|i| &i.name == name)
                .map_or(InputType::String, |i| InputType::parse(&i.kind));
            let typed = heat::typed(kind, value)
                .map_err(|e| ApiError::InvalidInput(e.at(field(name)).to_string()))?;
            Ok((name.clone(), heat::dispatched(kind, typed)))
        })
        .collect()
}

/// Longest long poll, in seconds.
pub const MAX_WAIT_SECS: u64 = 60;

/// `POST /v1/deployments`: records the deployment (QUEUED), publishes its request and
/// answers 202. The work runs on its own task so that a client hanging up half-way
/// cannot leave a recorded deployment unpublished.
///
/// The action must be a lifecycle action or one the config declares (else 422).
/// `inputs_from` starts the input values from another deployment's, hidden ones
/// included. With `skip_if_unchanged_from`, a deployment that would apply the same
/// config content with the same input values to the same server as that one is not
/// created: the answer is 200 with that deployment.
///
/// Every input value (given, inherited, referenced or defaulted) must be within the
/// nesting limit and, for the `script` group, passable as an environment variable
/// (422 `invalid_input` naming it, [`flue_proto::limits`]) and readable as its declared
/// type ([`flue_proto::heat`]); the record and the request
/// must each fit in one broker message (413 `too_large`).
///
/// An id already used answers 202 with the recorded deployment when the request is the
/// same ([`same_request`]), so a client can retry safely; 409 when it is not. When the
/// record's write is not confirmed, the answer is 503 `unavailable`: the deployment may
/// be recorded, so the client should retry with the same id.
pub async fn create(
    State(service): State<Service>,
    JsonBody(body): JsonBody<CreateDeployment>,
) -> Result<(StatusCode, Json<Deployment>), ApiError> {
    let tasks = service.tasks.clone();
    let created = tasks.spawn(create_and_publish(service, body)).await??;
    Ok(match created {
        Created::Accepted(record) => (StatusCode::ACCEPTED, Json(record.redacted())),
        Created::Unchanged(record) => (StatusCode::OK, Json(record.redacted())),
    })
}

/// What a `POST /v1/deployments` came to.
enum Created {
    /// Recorded and queued now, or by an earlier identical request.
    Accepted(DeploymentRecord),
    /// Nothing to do: the `skip_if_unchanged_from` deployment already applied it.
    Unchanged(DeploymentRecord),
}

async fn create_and_publish(service: Service, body: CreateDeployment) -> Result<Created, ApiError> {
    body.validate()?;
    let tenant = &service.config.tenant;
    let timeout_secs = body
        .timeout_secs
        .unwrap_or(service.config.default_timeout_secs);
    if timeout_secs == 0 || timeout_secs > MAX_TIMEOUT_SECS {
        return Err(ApiError::InvalidInput(format!(
            "timeout_secs must be between 1 and {MAX_TIMEOUT_SECS} (7 days), got {timeout_secs}"
        )));
    }
    // Independent reads: one round trip for both.
    let (config, server) = tokio::try_join!(
        service.store.config(tenant, &body.config_id),
        service.store.server(tenant, &body.server_id)
    )?;
    let config = config.ok_or_else(|| {
        ApiError::NotFound(format!("config {:?} not found", body.config_id.as_str()))
    })?;
    check_action(&config, &body.action)?;
    let server = server.ok_or_else(|| {
        ApiError::NotFound(format!("server {:?} not found", body.server_id.as_str()))
    })?;
    let inputs_from = match &body.inputs_from {
        Some(id) => {
            let from = referenced(&service, "inputs_from", id).await?;
            references::check(&service, &body, "inputs_from", &from.deployment).await?;
            Some(from)
        }
        None => None,
    };
    let skip_from = match &body.skip_if_unchanged_from {
        Some(id) => {
            let from = referenced(&service, "skip_if_unchanged_from", id).await?;
            references::check(&service, &body, "skip_if_unchanged_from", &from.deployment).await?;
            Some(from)
        }
        None => None,
    };
    // Read (and checked) before the body's values move below.
    let mut refs = Vec::with_capacity(body.input_refs.len());
    for (name, output) in &body.input_refs {
        let from = referenced(&service, "input_refs", &output.deployment_id).await?;
        references::check(
            &service,
            &body,
            &format!("input_refs.{name}"),
            &from.deployment,
        )
        .await?;
        refs.push((name, output, from));
    }
    // Where each input value came from, to name it when it breaks a limit.
    let given: BTreeSet<String> = body.input_values.keys().cloned().collect();
    let mut inherited = BTreeSet::new();
    // Inputs whose value is a hidden value the gateway stored, hence already sealed to it;
    // every other hidden value is sealed below, before anything is stored.
    let mut sealed_at_rest = BTreeSet::new();
    let (mut values, mut hidden) = match inputs_from {
        Some(from) => {
            let mut values = from.deployment.input_values;
            inherited.extend(values.keys().cloned());
            sealed_at_rest.extend(
                from.hidden_inputs
                    .iter()
                    .filter(|name| values.contains_key(*name) && !given.contains(*name))
                    .cloned(),
            );
            values.extend(body.input_values);
            (
                values,
                hidden_union(hidden_inputs(&config), &from.hidden_inputs),
            )
        }
        None => (body.input_values, hidden_inputs(&config)),
    };
    // Outputs of other deployments, hidden ones included, resolved here so that no
    // client ever reads them; the inputs they fill are hidden in turn.
    for (name, output, from) in refs {
        if from.deployment.status != DeploymentStatus::Complete {
            return Err(ApiError::InvalidInput(format!(
                "input_refs.{name}: deployment {:?} is {}, not COMPLETE",
                output.deployment_id.as_str(),
                from.deployment.status
            )));
        }
        let value = from
            .deployment
            .outputs
            .get(&output.output)
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        if from.hidden_outputs.contains(&output.output)
            && from.deployment.outputs.contains_key(&output.output)
        {
            sealed_at_rest.insert(name.clone());
        } else {
            sealed_at_rest.remove(name);
        }
        values.insert(name.clone(), value);
        if !hidden.contains(name) {
            hidden.push(name.clone());
        }
    }
    // Hidden defaults were sealed when the config was stored (those of older configs
    // were not: they are sealed now like a given value).
    sealed_at_rest.extend(
        config
            .inputs
            .iter()
            .filter(|i| i.hidden && !values.contains_key(&i.name))
            .filter(|i| i.default.as_ref().is_some_and(seal::is_sealed))
            .map(|i| i.name.clone()),
    );
    let mut input_values = with_defaults(&config, values);
    // The limits are about what the hook gets: carried hidden values are checked opened.
    let opened = opened_values(&input_values, &sealed_at_rest, &service.keys.sealing)?;
    let field = |name: &str| {
        if body.input_refs.contains_key(name) {
            format!("input_refs.{name}")
        } else if given.contains(name) {
            format!("input_values.{name}")
        } else if inherited.contains(name) {
            format!("inputs_from.{name}")
        } else {
            let i = config.inputs.iter().position(|i| i.name == name);
            format!("inputs[{}].default", i.unwrap_or_default())
        }
    };
    let as_hook_gets = as_declared(&config, &opened, field)?;
    check_input_values(&config.group, &as_hook_gets, field)?;
    let fresh: Vec<String> = hidden
        .iter()
        .filter(|name| !sealed_at_rest.contains(*name))
        .cloned()
        .collect();
    seal_at_rest(&mut input_values, &fresh, &service.keys.sealing)?;
    let id_given = body.id.is_some();
    let id = body.id.unwrap_or_else(DeploymentId::random);
    let now = OffsetDateTime::now_utc();
    let expires_at = now + Duration::from_secs(timeout_secs);
    let mut record = DeploymentRecord {
        deployment: Deployment {
            name: body.name.unwrap_or_else(|| id.to_string()),
            id,
            tenant: tenant.clone(),
            server_id: body.server_id,
            config_id: config.id.clone(),
            group: config.group.clone(),
            action: body.action,
            input_values,
            stack_id: body.stack_id,
            resource_name: body.resource_name,
            status: DeploymentStatus::Queued,
            status_reason: None,
            outputs: Default::default(),
            deploy_stdout: String::new(),
            deploy_stderr: String::new(),
            deploy_status_code: None,
            timeout_secs,
            created_at: now,
            updated_at: now,
            delivered_at: None,
            started_at: None,
            finished_at: None,
            expires_at,
        },
        request_published: false,
        hidden_inputs: hidden,
        hidden_outputs: hidden_outputs(&config),
        request_digest: None,
        agent_jwt: None,
        polled: false,
    };
    // Last of the checks that read: joining a stack writes the server record.
    record.agent_jwt =
        crate::rights::for_stack(&service, &server, record.deployment.stack_id.as_ref()).await?;
    record.polled = server.transport == Transport::Poll;
    let req = request(
        &record,
        &config,
        &service.keys.sealing,
        poll::request_key(&service, &server),
    )?;
    service.broker.fits_json("deployment request", &req)?;
    // Recorded before the request is published, so that no answer can come first.
    record.request_digest = Some(req.digest());
    service.broker.fits_json("deployment record", &record)?;
    let d = &record.deployment;
    if let Some(from) = skip_from {
        // A retry of a request that did create its deployment is answered like any retry.
        let recorded = id_given && service.store.deployment(tenant, &d.id).await?.is_some();
        if !recorded && unchanged(&service, &from, &record, &config).await? {
            info!(deployment.id = %from.deployment.id, server.id = %d.server_id, action = %d.action, "deployment unchanged; nothing created");
            return Ok(Created::Unchanged(from));
        }
    }
    match service.store.create_deployment(&record).await {
        Ok(true) => {}
        Ok(false) => {
            return repeated(&service, &record, &config)
                .await
                .map(Created::Accepted);
        }
        Err(e) => {
            // The write may still have happened (a lost acknowledgement, a timed-out
            // request): watch the id as if it had, so that a record that is there gets
            // published or times out. Both do nothing if it is not.
            warn!(error = %chain(&e), deployment.id = %d.id, "deployment record not confirmed written; watching it in case it was");
            service.timeouts.insert(d.id.clone(), expires_at);
            service.defer(&record);
            return Err(ApiError::Unavailable(format!(
                "deployment {:?} may or may not have been recorded; retry with the same id",
                d.id.as_str()
            )));
        }
    }
    service.timeouts.insert(d.id.clone(), expires_at);
    service.publish_or_defer(&record, &config).await;
    info!(
        deployment.id = %d.id, server.id = %d.server_id, config.id = %d.config_id,
        action = %d.action, timeout_secs, "deployment queued"
    );
    Ok(Created::Accepted(record))
}

/// Refuses an action that is neither a lifecycle action nor declared by the config.
fn check_action(config: &Config, action: &Action) -> Result<(), ApiError> {
    if config.allows(action) {
        return Ok(());
    }
    let declared = if config.actions.is_empty() {
        "it declares no ad-hoc actions".to_owned()
    } else {
        let names: Vec<&str> = config.actions.keys().map(String::as_str).collect();
        format!("it declares: {}", names.join(", "))
    };
    Err(ApiError::InvalidInput(format!(
        "action {:?} is not declared by config {:?} ({declared})",
        action.as_str(),
        config.id.as_str(),
    )))
}

/// The deployment a body field (`field`) names, which must exist.
async fn referenced(
    service: &Service,
    field: &str,
    id: &DeploymentId,
) -> Result<DeploymentRecord, ApiError> {
    service
        .store
        .deployment(&service.config.tenant, id)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!("{field} deployment {:?} not found", id.as_str()))
        })
}

/// True when `new` would apply what `from` applied: the same server, the same input
/// values (hidden ones included) and a config with the same content.
async fn unchanged(
    service: &Service,
    from: &DeploymentRecord,
    new: &DeploymentRecord,
    config: &Config,
) -> Result<bool, ApiError> {
    let (a, b) = (&from.deployment, &new.deployment);
    if a.server_id != b.server_id || a.input_values.len() != b.input_values.len() {
        return Ok(false);
    }
    // Sealed values differ on every seal: compare what they hold. One that does not open
    // counts as changed, so the deployment runs.
    let key = &service.keys.sealing;
    match (opened_inputs(from, key), opened_inputs(new, key)) {
        (Ok(theirs), Ok(ours)) if theirs == ours => {}
        _ => return Ok(false),
    }
    if a.config_id == config.id {
        return Ok(true);
    }
    let theirs = service
        .store
        .config(&service.config.tenant, &a.config_id)
        .await?;
    Ok(theirs.is_some_and(|theirs| same_config_content(&theirs, config)))
}

/// A `POST` for an id already recorded: the recorded deployment if `new` asks for the
/// same, after making sure it is watched and on its way to the agent (the earlier
/// attempt may have failed half-way); a conflict otherwise.
async fn repeated(
    service: &Service,
    new: &DeploymentRecord,
    config: &Config,
) -> Result<DeploymentRecord, ApiError> {
    let id = &new.deployment.id;
    let conflict = || {
        ApiError::Conflict(format!(
            "deployment {:?} already exists with a different request",
            id.as_str()
        ))
    };
    let stored = service
        .store
        .deployment(&service.config.tenant, id)
        .await?
        .ok_or_else(conflict)?;
    if !same_request(&stored, new) {
        return Err(conflict());
    }
    if let Some(deadline) = timeout_deadline(&stored.deployment) {
        service.timeouts.insert(id.clone(), deadline);
        if !stored.request_published {
            service.publish_or_defer(&stored, config).await;
        }
    }
    info!(deployment.id = %id, status = %stored.deployment.status, "deployment request repeated; answering with the recorded one");
    Ok(stored)
}

/// Query of `GET /v1/deployments/{id}`.
#[derive(Debug, Deserialize)]
pub struct WaitQuery {
    /// Seconds to wait for a change (0..=60).
    pub wait_secs: Option<u64>,
    /// Wait until the status differs from this one (default: until it is terminal).
    pub after_status: Option<DeploymentStatus>,
}

/// `GET /v1/deployments/{id}[?wait_secs=N&after_status=S]`.
///
/// With `wait_secs`, answers as soon as the status differs from `after_status` (or,
/// without it, is terminal), or when the time is up, with the record as it then is.
/// Waiting shares the gateway's one watch of the deployments bucket ([`Waiters`]): the
/// waiter is registered before the first read, so no change is missed, and a long poll
/// costs the broker nothing while it waits.
pub async fn get(
    State(service): State<Service>,
    Extension(waiters): Extension<Waiters>,
    PathId(id): PathId<DeploymentId>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<Deployment>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidInput(inner_text(&e)))?;
    let wait = query.wait_secs.unwrap_or(0);
    if wait > MAX_WAIT_SECS {
        return Err(ApiError::InvalidInput(format!(
            "wait_secs must be at most {MAX_WAIT_SECS}, got {wait}"
        )));
    }
    let done = |status: DeploymentStatus| match query.after_status {
        Some(after) => status != after,
        None => status.is_terminal(),
    };
    let tenant = &service.config.tenant;
    let not_found = || ApiError::NotFound(format!("deployment {:?} not found", id.as_str()));
    if wait == 0 {
        let record = service
            .store
            .deployment(tenant, &id)
            .await?
            .ok_or_else(not_found)?;
        return Ok(Json(record.redacted()));
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    let mut waiter = waiters.wait_for(deployment_key(tenant, &id));
    let (record, mut revision) = service
        .store
        .deployment_at(tenant, &id)
        .await?
        .ok_or_else(not_found)?;
    let mut latest = Arc::new(record);
    while !done(latest.deployment.status) {
        let wake = tokio::select! {
            () = service.shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => break,
            wake = waiter.next() => wake,
        };
        match wake {
            // Writes can reach a waiter out of order with its own read: keep the newest.
            Wake::Changed(seen) if seen.revision > revision => {
                latest = seen.record;
                revision = seen.revision;
            }
            Wake::Changed(_) => {}
            Wake::Reread => match service.store.deployment_at(tenant, &id).await {
                Ok(Some((record, at))) if at > revision => {
                    latest = Arc::new(record);
                    revision = at;
                }
                Ok(_) => {}
                // The broker is away: keep waiting on what is known; the watch asks again
                // once it is back.
                Err(e) => {
                    warn!(error = %chain(&e), deployment.id = %id, "cannot read the deployment again while waiting")
                }
            },
        }
    }
    Ok(Json(latest.redacted()))
}

/// Deployment records read at once while listing.
const LIST_READS_IN_FLIGHT: usize = 16;

/// Query of `GET /v1/deployments`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this server's deployments (empty: any server).
    pub server: Option<String>,
    /// Only this stack's deployments (empty: any stack).
    pub stack: Option<String>,
    /// Only deployments in this status (`QUEUED`, `IN_PROGRESS`, `COMPLETE`, `FAILED`).
    pub status: Option<String>,
    /// Index entries per page (1..=1000, default 100).
    pub limit: Option<String>,
    /// Where the page starts: the previous page's `flue-next-cursor` header.
    pub cursor: Option<String>,
    /// `output`: whole deployments, with outputs, stdout and stderr.
    pub include: Option<String>,
}

/// `GET /v1/deployments[?limit=N&cursor=C&server=S&stack=K&status=X&include=output]`:
/// one page of the tenant's deployments in creation order, redacted, as summaries
/// (no outputs, stdout or stderr) unless `include=output`. The cursor of the next page
/// is in the `flue-next-cursor` header, absent on the last page. A bad parameter is a
/// 400 `invalid_query` naming it.
///
/// A page reads `limit` entries of the `flue_server_deployments` index from the
/// cursor on (only `server`'s with `server`) and their records: O(page), whatever the
/// history. `stack` and `status` filter the records read, so such a page may hold fewer
/// than `limit` items, even none, and still have a next one. A record that cannot be
/// decoded is left out (logged), and the number left out is in the
/// `flue-skipped-records` header.
pub async fn list(
    State(service): State<Service>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Paged<Deployment>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(inner_text(&e)))?;
    let limit = page_limit(query.limit.as_deref())?;
    let server = query_id::<ServerId>("server", query.server.as_deref())?;
    let stack = query_id::<StackId>("stack", query.stack.as_deref())?;
    let status = query_status(query.status.as_deref())?;
    let with_output = match query.include.as_deref() {
        None | Some("") => false,
        Some("output") => true,
        Some(other) => {
            return Err(ApiError::InvalidQuery(format!(
                "query parameter \"include\": only \"output\" is known, got {other:?}"
            )));
        }
    };
    let tenant = &service.config.tenant;
    let from = Pages::Deployments.start(tenant, query.cursor.as_deref())?;
    let page = service
        .store
        .deployment_page(tenant, server.as_ref(), from, limit)
        .await?;
    let store = &service.store;
    let reads: Vec<_> = futures_util::stream::iter(page.items)
        .map(|entry| async move { store.deployment(tenant, &entry.id).await })
        .buffered(LIST_READS_IN_FLIGHT)
        .collect()
        .await;
    let wanted = |r: &DeploymentRecord| {
        stack
            .as_ref()
            .is_none_or(|s| r.deployment.stack_id.as_ref() == Some(s))
            && status.is_none_or(|s| r.deployment.status == s)
    };
    let mut listing = Listing::default();
    for read in reads {
        // A record never written (a create that failed after its index entry) is not there.
        if let Some(record) = listing.skip_undecodable(read)?.filter(wanted) {
            listing.items.push(if with_output {
                record.redacted()
            } else {
                record.summary()
            });
        }
    }
    Ok(Paged {
        listed: Listed {
            items: listing.items,
            skipped: listing.skipped,
        },
        next: page.next.map(|seq| Pages::Deployments.cursor(tenant, seq)),
    })
}

/// The `status` parameter: absent or empty is any status.
fn query_status(value: Option<&str>) -> Result<Option<DeploymentStatus>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(raw) => DeploymentStatus::from_wire(raw).map(Some).ok_or_else(|| {
            ApiError::InvalidQuery(format!(
                "query parameter \"status\": must be QUEUED, IN_PROGRESS, COMPLETE or FAILED, got {raw:?}"
            ))
        }),
    }
}

/// An id given as query parameter `name`: absent or empty is none.
fn query_id<T: PathIdKind>(name: &str, value: Option<&str>) -> Result<Option<T>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(raw) => raw.parse().map(Some).map_err(|e: IdError| {
            ApiError::InvalidQuery(format!(
                "query parameter {name:?}: invalid {} {raw:?}: {e}",
                T::WHAT
            ))
        }),
    }
}

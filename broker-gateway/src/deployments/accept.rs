//! Accepting a deployment: validate it, resolve what it references, build its record,
//! store it, publish its request (or leave it to the background) and watch its timeout.
//!
//! The API handler only parses the body and maps [`AcceptError`] to a status; everything
//! a `POST /v1/deployments` means is here, on the handles [`Accept`] holds.

use std::sync::Arc;

use flue_proto::poll::Transport;
use flue_proto::{Action, Config, CreateDeployment, DeploymentId, Server, TenantId, seal};
use time::OffsetDateTime;
use tracing::{info, warn};

use super::inputs::{self, Sources};
use super::publish::{Publisher, request};
use super::{AcceptError, references};
use crate::broker::Broker;
use crate::config::MAX_TIMEOUT_SECS;
use crate::error::chain;
use crate::record::{
    DeploymentRecord, NewDeployment, same_config_content, same_request, timeout_deadline,
};
use crate::rights::StackRights;
use crate::sealing::{self, SealFailure, opened_inputs};
use crate::store;

/// What a deployment's acceptance came to.
#[derive(Debug)]
pub enum Created {
    /// Recorded and queued now, or by an earlier identical request.
    Accepted(DeploymentRecord),
    /// Nothing to do: the `skip_if_unchanged_from` deployment already applied it.
    Unchanged(DeploymentRecord),
}

/// Everything accepting a deployment takes; cheap to clone.
#[derive(Debug, Clone)]
pub struct Accept {
    /// The tenant the deployments are for.
    pub tenant: TenantId,
    /// `--default-timeout-secs`: a deployment's timeout when the body gives none.
    pub default_timeout_secs: u64,
    /// The configs deployments apply.
    pub configs: store::Configs,
    /// The servers they run on.
    pub servers: store::Servers,
    /// Deployment records (new ones, and those a body references).
    pub deployments: store::Deployments,
    /// Stack records (the servers a stack's outputs may go to).
    pub stacks: store::Stacks,
    /// What the broker takes (a record and a request must each fit one message).
    pub broker: Broker,
    /// Opens hidden values stored sealed to the gateway, and seals new ones.
    pub sealing: Arc<nkeys::XKey>,
    /// The agent JWT a stack deployment's request carries.
    pub rights: StackRights,
    /// Publishes the request, and watches the deployment's timeout.
    pub publisher: Publisher,
}

impl Accept {
    /// Accepts `body`: records the deployment (QUEUED), publishes its request (or defers
    /// it) and watches its timeout.
    ///
    /// The action must be a lifecycle action or one the config declares. `inputs_from`
    /// starts the input values from another deployment's, hidden ones included. With
    /// `skip_if_unchanged_from`, a deployment that would apply the same config content
    /// with the same input values to the same server as that one is not created:
    /// [`Created::Unchanged`] with that deployment.
    ///
    /// Every input value (given, inherited, referenced or defaulted) must be within the
    /// nesting limit and, for the `script` group, passable as an environment variable
    /// ([`flue_proto::limits`]) and readable as its declared type ([`flue_proto::heat`]);
    /// the record and the request must each fit in one broker message.
    ///
    /// An id already used gives the recorded deployment when the request is the same
    /// ([`same_request`]), so a client can retry safely; a conflict when it is not. When
    /// the record's write is not confirmed, [`AcceptError::NotConfirmed`]: the deployment
    /// may be recorded, so the client should retry with the same id.
    pub async fn accept(&self, body: CreateDeployment) -> Result<Created, AcceptError> {
        body.validate()?;
        let tenant = &self.tenant;
        let timeout_secs = body.timeout_secs.unwrap_or(self.default_timeout_secs);
        if timeout_secs == 0 || timeout_secs > MAX_TIMEOUT_SECS {
            return Err(AcceptError::Invalid(format!(
                "timeout_secs must be between 1 and {MAX_TIMEOUT_SECS} (7 days), got {timeout_secs}"
            )));
        }
        let (config, server) = target((&self.configs, &self.servers), tenant, &body).await?;
        let inputs_from = match &body.inputs_from {
            Some(id) => Some(self.referenced_by(&body, "inputs_from", id).await?),
            None => None,
        };
        let skip_from = match &body.skip_if_unchanged_from {
            Some(id) => Some(
                self.referenced_by(&body, "skip_if_unchanged_from", id)
                    .await?,
            ),
            None => None,
        };
        let mut refs = Vec::with_capacity(body.input_refs.len());
        for (name, output) in &body.input_refs {
            let field = format!("input_refs.{name}");
            let from = self
                .referenced_by_as(&body, "input_refs", &field, &output.deployment_id)
                .await?;
            refs.push((name, output, from));
        }
        let resolved = inputs::resolve(
            Sources {
                config: &config,
                given: body.input_values,
                inputs_from,
                refs,
            },
            &self.sealing,
        )?;
        let id_given = body.id.is_some();
        let id = body.id.unwrap_or_else(DeploymentId::random);
        let new = NewDeployment {
            id,
            name: body.name,
            tenant: tenant.clone(),
            server_id: body.server_id,
            action: body.action,
            input_values: resolved.values,
            hidden_inputs: resolved.hidden,
            stack_id: body.stack_id,
            resource_name: body.resource_name,
            timeout_secs,
        };
        let mut record = DeploymentRecord::queued(new, &config, OffsetDateTime::now_utc());
        // Last of the checks that read: joining a stack writes the server record.
        record.agent_jwt = self
            .rights
            .for_stack(&server, record.deployment.stack_id.as_ref())
            .await?;
        record.polled = server.transport == Transport::Poll;
        let req = request(
            &record,
            &config,
            &self.sealing,
            request_key(&self.sealing, &server),
        )?;
        self.broker.fits_json("deployment request", &req)?;
        // Recorded before the request is published, so that no answer can come first.
        record.request_digest = Some(req.digest());
        self.broker.fits_json("deployment record", &record)?;
        let d = &record.deployment;
        if let Some(from) = skip_from {
            // A retry of a request that did create its deployment is answered like any retry.
            let recorded = id_given && self.deployments.get(tenant, &d.id).await?.is_some();
            if !recorded && self.unchanged(&from, &record, &config).await? {
                info!(deployment.id = %from.deployment.id, server.id = %d.server_id, action = %d.action, "deployment unchanged; nothing created");
                return Ok(Created::Unchanged(from));
            }
        }
        let timeouts = self.publisher.timeouts();
        match self.deployments.create(&record).await {
            Ok(true) => {}
            Ok(false) => return self.repeated(&record, &config).await.map(Created::Accepted),
            // The broker's own refusal for lack of storage: nothing was written, so
            // nothing is watched; the client is told the request was not accepted (507).
            Err(e) if crate::broker::out_of_storage(&e) => return Err(e.into()),
            Err(e) => {
                // The write may still have happened (a lost acknowledgement, a timed-out
                // request): watch the id as if it had, so that a record that is there gets
                // published or times out. Both do nothing if it is not.
                warn!(error = %chain(&e), deployment.id = %d.id, "deployment record not confirmed written; watching it in case it was");
                timeouts.insert(d.id.clone(), d.expires_at);
                self.publisher.defer(&record);
                return Err(AcceptError::NotConfirmed(d.id.clone()));
            }
        }
        timeouts.insert(d.id.clone(), d.expires_at);
        // The request just built (its digest is the record's): not sealed and encoded again,
        // nor the server read again for a hidden input's key.
        self.publisher
            .publish_or_defer(&record, &config, Some(&req))
            .await;
        info!(
            deployment.id = %d.id, server.id = %d.server_id, config.id = %d.config_id,
            action = %d.action, timeout_secs, "deployment queued"
        );
        Ok(Created::Accepted(record))
    }

    /// The deployment a body field (`field`) names, which must exist and be one `body`
    /// may take values from ([`references::check`]).
    async fn referenced_by(
        &self,
        body: &CreateDeployment,
        field: &str,
        id: &DeploymentId,
    ) -> Result<DeploymentRecord, AcceptError> {
        self.referenced_by_as(body, field, field, id).await
    }

    /// [`Self::referenced_by`], named `field` when missing and `checked_as` when refused.
    async fn referenced_by_as(
        &self,
        body: &CreateDeployment,
        field: &str,
        checked_as: &str,
        id: &DeploymentId,
    ) -> Result<DeploymentRecord, AcceptError> {
        let from = self
            .deployments
            .get(&self.tenant, id)
            .await?
            .ok_or_else(|| {
                AcceptError::NotFound(format!("{field} deployment {:?} not found", id.as_str()))
            })?;
        references::check(
            (&self.tenant, &self.stacks),
            body,
            checked_as,
            &from.deployment,
        )
        .await?;
        Ok(from)
    }

    /// True when `new` would apply what `from` applied: the same server, the same input
    /// values (hidden ones included) and a config with the same content.
    async fn unchanged(
        &self,
        from: &DeploymentRecord,
        new: &DeploymentRecord,
        config: &Config,
    ) -> Result<bool, AcceptError> {
        let (a, b) = (&from.deployment, &new.deployment);
        if a.server_id != b.server_id || a.input_values.len() != b.input_values.len() {
            return Ok(false);
        }
        // Sealed values differ on every seal: compare what they hold. One that does not
        // open counts as changed, so the deployment runs.
        let key = &self.sealing;
        match (opened_inputs(from, key), opened_inputs(new, key)) {
            (Ok(theirs), Ok(ours)) if theirs == ours => {}
            _ => return Ok(false),
        }
        if a.config_id == config.id {
            return Ok(true);
        }
        let theirs = self.configs.get(&self.tenant, &a.config_id).await?;
        Ok(theirs.is_some_and(|theirs| same_config_content(&theirs, config)))
    }

    /// An acceptance for an id already recorded: the recorded deployment if `new` asks
    /// for the same, after making sure it is watched and on its way to the agent (the
    /// earlier attempt may have failed half-way); a conflict otherwise.
    async fn repeated(
        &self,
        new: &DeploymentRecord,
        config: &Config,
    ) -> Result<DeploymentRecord, AcceptError> {
        let id = &new.deployment.id;
        let stored = recorded_as(&self.deployments, &self.tenant, new).await?;
        if let Some(deadline) = timeout_deadline(&stored.deployment) {
            self.publisher.timeouts().insert(id.clone(), deadline);
            if !stored.request_published {
                self.publisher.publish_or_defer(&stored, config, None).await;
            }
        }
        info!(deployment.id = %id, status = %stored.deployment.status, "deployment request repeated; answering with the recorded one");
        Ok(stored)
    }
}

/// The config and the server `body` names, both existing, the action one the config
/// allows; read together (one round trip for both).
async fn target(
    (configs, servers): (&store::Configs, &store::Servers),
    tenant: &TenantId,
    body: &CreateDeployment,
) -> Result<(Config, Server), AcceptError> {
    let (config, server) = tokio::try_join!(
        configs.get(tenant, &body.config_id),
        servers.get(tenant, &body.server_id)
    )?;
    let config = config.ok_or_else(|| {
        AcceptError::NotFound(format!("config {:?} not found", body.config_id.as_str()))
    })?;
    check_action(&config, &body.action)?;
    let server = server.ok_or_else(|| {
        AcceptError::NotFound(format!("server {:?} not found", body.server_id.as_str()))
    })?;
    Ok((config, server))
}

/// The deployment recorded under `new`'s id, when it asks for what `new` asks
/// ([`same_request`]): a retry. A conflict when it asks for something else (or is gone).
async fn recorded_as(
    deployments: &store::Deployments,
    tenant: &TenantId,
    new: &DeploymentRecord,
) -> Result<DeploymentRecord, AcceptError> {
    let id = &new.deployment.id;
    let conflict = || {
        AcceptError::Conflict(format!(
            "deployment {:?} already exists with a different request",
            id.as_str()
        ))
    };
    let stored = deployments.get(tenant, id).await?.ok_or_else(conflict)?;
    if !same_request(&stored, new) {
        return Err(conflict());
    }
    Ok(stored)
}

/// Refuses an action that is neither a lifecycle action nor declared by the config.
fn check_action(config: &Config, action: &Action) -> Result<(), AcceptError> {
    if config.allows(action) {
        return Ok(());
    }
    if action.as_str() == flue_proto::CHECK_ACTION {
        return Err(AcceptError::Invalid(format!(
            "config {:?} has no CHECK hook, so it cannot be checked (a check never runs the config's main body)",
            config.id.as_str()
        )));
    }
    let declared = if config.actions.is_empty() {
        "it declares no ad-hoc actions".to_owned()
    } else {
        let names: Vec<&str> = config.actions.keys().map(String::as_str).collect();
        format!("it declares: {}", names.join(", "))
    };
    Err(AcceptError::Invalid(format!(
        "action {:?} is not declared by config {:?} ({declared})",
        action.as_str(),
        config.id.as_str(),
    )))
}

/// The key a deployment's request is sealed to when its digest is computed: the
/// server's, or for a polling server (which has none, and gets no request message) the
/// gateway's own (`gateway`).
fn request_key(gateway: &nkeys::XKey, server: &Server) -> Result<nkeys::XKey, SealFailure> {
    match server.transport {
        Transport::Poll => seal::public_key(&gateway.public_key())
            .map_err(|_| SealFailure::BadServerKey(server.id.clone())),
        Transport::Nats => sealing::server_key(server),
    }
}

/// The rules of an acceptance on in-memory stores ([`crate::store::Store::in_memory`]).
#[cfg(test)]
mod tests {
    use flue_proto::{ConfigId, DeploymentStatus, ServerId};
    use serde_json::json;

    use super::*;
    use crate::record::tests::{config, record};
    use crate::store::Store;

    fn tenant() -> TenantId {
        TenantId::new("t").expect("id")
    }

    fn server() -> Server {
        serde_json::from_value(json!({
            "id": "s1", "tenant": "t", "name": "s1", "created_at": "2026-01-01T00:00:00Z"
        }))
        .expect("server")
    }

    fn body(action: &str) -> CreateDeployment {
        serde_json::from_value(json!({
            "config_id": "c1", "server_id": "s1", "action": action
        }))
        .expect("body")
    }

    /// A store with [`config`] and [`server`].
    async fn store() -> Store {
        let store = Store::in_memory();
        assert!(
            store
                .configs
                .create(&tenant(), &config())
                .await
                .expect("store")
                .is_none()
        );
        assert!(
            store
                .servers
                .create(&server())
                .await
                .expect("store")
                .is_none()
        );
        store
    }

    #[tokio::test]
    async fn the_config_and_server_a_body_names_are_read() {
        let store = store().await;
        let (config, server) = target((&store.configs, &store.servers), &tenant(), &body("CREATE"))
            .await
            .expect("target");
        assert_eq!(config.id, ConfigId::new("c1").expect("id"));
        assert_eq!(server.id, ServerId::new("s1").expect("id"));
    }

    #[tokio::test]
    async fn a_missing_config_or_server_is_not_found_by_name() {
        let store = Store::in_memory();
        let err = target((&store.configs, &store.servers), &tenant(), &body("CREATE"))
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, AcceptError::NotFound(m) if m == r#"config "c1" not found"#),
            "{err:?}"
        );
        store
            .configs
            .create(&tenant(), &config())
            .await
            .expect("store");
        let err = target((&store.configs, &store.servers), &tenant(), &body("CREATE"))
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, AcceptError::NotFound(m) if m == r#"server "s1" not found"#),
            "{err:?}"
        );
        // Another tenant's server is not this tenant's.
        let mut theirs = server();
        theirs.tenant = TenantId::new("other").expect("id");
        store.servers.create(&theirs).await.expect("store");
        let err = target((&store.configs, &store.servers), &tenant(), &body("CREATE"))
            .await
            .expect_err("refused");
        assert!(matches!(err, AcceptError::NotFound(_)), "{err:?}");
    }

    #[tokio::test]
    async fn an_action_the_config_does_not_declare_is_refused_naming_it() {
        let store = store().await;
        let err = target((&store.configs, &store.servers), &tenant(), &body("REBOOT"))
            .await
            .expect_err("refused");
        let AcceptError::Invalid(message) = err else {
            panic!("{err:?}");
        };
        assert!(
            message.contains(r#"action "REBOOT" is not declared by config "c1""#),
            "{message}"
        );
        // CHECK needs a CHECK hook, which this config has not.
        let err = target((&store.configs, &store.servers), &tenant(), &body("CHECK"))
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, AcceptError::Invalid(m) if m.contains("no CHECK hook")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_new_deployment_is_recorded_pending_and_listed_under_its_server() {
        let store = store().await;
        let new = record();
        assert!(store.deployments.create(&new).await.expect("create"));
        let d = &new.deployment;
        assert_eq!(
            store
                .deployments
                .pending_ids(&d.tenant)
                .await
                .expect("store"),
            vec![d.id.clone()]
        );
        let listed = store
            .deployments
            .of_server(&d.tenant, &d.server_id)
            .await
            .expect("store");
        assert_eq!(listed, vec![new.clone()]);
        let page = store
            .deployments
            .page(&d.tenant, None, 1, 10)
            .await
            .expect("store");
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].id, d.id);
    }

    #[tokio::test]
    async fn the_same_request_again_is_answered_with_the_recorded_deployment() {
        let store = store().await;
        let first = record();
        assert!(store.deployments.create(&first).await.expect("store"));
        // A later attempt: another time, the same request.
        let mut again = record();
        again.deployment.created_at += time::Duration::seconds(5);
        assert!(!store.deployments.create(&again).await.expect("store"));
        let stored = recorded_as(&store.deployments, &tenant(), &again)
            .await
            .expect("same");
        assert_eq!(stored, first);
    }

    #[tokio::test]
    async fn another_request_under_a_used_id_is_a_conflict() {
        let store = store().await;
        assert!(store.deployments.create(&record()).await.expect("store"));
        let mut other = record();
        other
            .deployment
            .input_values
            .insert("foo".into(), json!("something else"));
        assert!(!store.deployments.create(&other).await.expect("store"));
        let err = recorded_as(&store.deployments, &tenant(), &other)
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, AcceptError::Conflict(m) if m.contains(r#"deployment "d1" already exists with a different request"#)),
            "{err:?}"
        );
        let mut elsewhere = record();
        elsewhere.deployment.server_id = ServerId::new("s2").expect("id");
        let err = recorded_as(&store.deployments, &tenant(), &elsewhere)
            .await
            .expect_err("refused");
        assert!(matches!(err, AcceptError::Conflict(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_retry_of_a_finished_deployment_leaves_nothing_pending() {
        let store = store().await;
        let mut done = record();
        done.deployment.status = DeploymentStatus::Complete;
        assert!(store.deployments.create(&done).await.expect("store"));
        assert!(
            store
                .deployments
                .pending_ids(&tenant())
                .await
                .expect("store")
                .is_empty()
        );
        // The retry marks it pending before it finds the id taken, then clears it.
        assert!(!store.deployments.create(&record()).await.expect("store"));
        assert!(
            store
                .deployments
                .pending_ids(&tenant())
                .await
                .expect("store")
                .is_empty()
        );
    }
}

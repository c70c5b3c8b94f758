//! `flue events`: prints events as JSON lines; and [`Follower`], the event stream that
//! reconnects after a dropped connection, shared with `flue watch`.

use std::io::Write;
use std::time::Duration;

use flue_proto::{CloudEvent, EventFilter};

use super::args::{EventsArgs, EventsCommand};
use super::{CliError, Outcome};
use flue_client::events::{EventQuery, EventStart, EventStream, StreamItem, StreamNotice};
use flue_client::{Client, ClientError};

/// Pause before reconnecting (the gateway's own `retry:`).
const RECONNECT_PAUSE: Duration = Duration::from_secs(2);
/// Reconnections in a row a replay (no `--follow`) tries before giving up.
const REPLAY_RECONNECTS: u32 = 5;

/// Prints listener consumers as a table: name, listener, pending events, idle limit,
/// last delivery.
fn consumers_table(
    consumers: &[flue_proto::creds::ListenerConsumer],
    out: &mut impl Write,
) -> std::io::Result<()> {
    let format = &time::format_description::well_known::Rfc3339;
    writeln!(
        out,
        "{:<28} {:<14} {:>9} {:>9}  LAST ACTIVE",
        "NAME", "LISTENER", "PENDING", "IDLE (s)"
    )?;
    for c in consumers {
        let last = c
            .last_active
            .and_then(|at| at.format(format).ok())
            .unwrap_or_else(|| "-".to_owned());
        writeln!(
            out,
            "{:<28} {:<14} {:>9} {:>9}  {last}",
            c.name,
            c.listener.as_deref().unwrap_or("-"),
            c.pending,
            c.idle_limit_secs
        )?;
    }
    Ok(())
}

/// Runs `flue events`.
pub(crate) async fn run(
    client: &Client,
    args: EventsArgs,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    match args.command {
        Some(EventsCommand::Credentials { out: path, force }) => {
            super::creds::check_writable(&path, force)?;
            let minted = client.create_listener_credentials().await?;
            super::creds::write(&path, &minted.credentials, force)?;
            writeln!(
                out,
                "listener {} of tenant {} written to {} (JetStream domain {:?}, stream {}); its consumer names: {}",
                minted.listener,
                minted.tenant,
                path.display(),
                minted.js_domain,
                minted.stream,
                minted.consumers.join(" ")
            )?;
            return Ok(Outcome::Success);
        }
        Some(EventsCommand::Consumers { json }) => {
            let listed = client.list_listener_consumers().await?;
            if json {
                write!(out, "{}", super::render::pretty_json(&listed))?;
            } else {
                consumers_table(&listed.consumers, out)?;
            }
            return Ok(Outcome::Success);
        }
        Some(EventsCommand::DeleteConsumer { name }) => {
            client.delete_listener_consumer(&name).await?;
            writeln!(out, "listener consumer {name} deleted")?;
            return Ok(Outcome::Success);
        }
        None => {}
    }
    let start = match (args.after, args.since, args.all) {
        (Some(seq), _, _) => EventStart::After(seq),
        (_, Some(at), _) => EventStart::Since(at),
        (_, _, true) => EventStart::All,
        // Following starts with what comes next; a replay prints everything kept.
        _ if args.follow => EventStart::New,
        _ => EventStart::All,
    };
    let query = EventQuery {
        filter: EventFilter {
            types: args.types,
            server: args.server,
            stack: args.stack,
            deployment: args.deployment,
        },
        start,
        follow: args.follow,
    };
    let mut events = Follower::new(client, query);
    loop {
        match events.next().await? {
            Followed::Event { seq, event } => {
                let written = writeln!(out, "{}", json_line(seq, &event, args.with_seq))
                    .and_then(|()| out.flush());
                match written {
                    Ok(()) => {}
                    // The reader went away (`flue events -f | head -1`): nothing left to do.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        return Ok(Outcome::Success);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Followed::Notice(notice) => warn_notice(&notice),
            Followed::Lost(why) => eprintln!("warning: {why}; reconnecting"),
            Followed::Restored => eprintln!("warning: reconnected; resuming after the last event"),
            Followed::End => return Ok(Outcome::Success),
        }
    }
}

/// One event as a JSON line; with `with_seq`, `"seq"` comes first.
fn json_line(seq: u64, event: &CloudEvent, with_seq: bool) -> String {
    let json = serde_json::to_string(event).expect("an event always serialises");
    match json.strip_prefix('{') {
        Some(rest) if with_seq => format!("{{\"seq\":{seq},{rest}"),
        _ => json,
    }
}

/// A `flue-error` block, on stderr.
pub(crate) fn warn_notice(notice: &StreamNotice) {
    eprintln!("warning: {}: {}", notice.code, notice.message);
}

/// What [`Follower::next`] got.
#[derive(Debug)]
pub(crate) enum Followed {
    /// An event and its stream sequence.
    Event {
        /// Stream sequence.
        seq: u64,
        /// The event.
        event: Box<CloudEvent>,
    },
    /// The gateway's `flue-error` block (events were missed).
    Notice(StreamNotice),
    /// The connection broke (why); reconnection is under way.
    Lost(String),
    /// Connected again, resuming after the last event.
    Restored,
    /// A replay is over.
    End,
}

/// The event stream of one query, reconnecting after a dropped connection with the last
/// sequence seen, so nothing is missed and nothing repeated.
///
/// The first connection's failure is returned (a wrong URL, a refused query); later ones
/// are retried every [`RECONNECT_PAUSE`], for ever when following, at most
/// [`REPLAY_RECONNECTS`] times in a row in a replay. A refused query (4xx) always ends it.
pub(crate) struct Follower<'a> {
    client: &'a Client,
    query: EventQuery,
    stream: Option<EventStream>,
    /// The last sequence seen (an event, or the position the stream started after).
    last: Option<u64>,
    connected: bool,
    failures: u32,
}

impl<'a> Follower<'a> {
    /// A follower of `query`; it connects on the first [`Follower::next`].
    pub(crate) fn new(client: &'a Client, query: EventQuery) -> Self {
        Self {
            client,
            query,
            stream: None,
            last: None,
            connected: false,
            failures: 0,
        }
    }

    /// Opens the stream now: once this returns, every event published afterwards will
    /// be delivered.
    pub(crate) async fn connect(&mut self) -> Result<(), CliError> {
        let stream = self.client.events(&self.query).await?;
        self.stream = Some(stream);
        self.connected = true;
        Ok(())
    }

    /// The next event or change of the connection.
    pub(crate) async fn next(&mut self) -> Result<Followed, CliError> {
        loop {
            let Some(stream) = self.stream.as_mut() else {
                if !self.connected {
                    self.connect().await?;
                    continue;
                }
                match self.reconnect().await? {
                    Some(followed) => return Ok(followed),
                    None => continue,
                }
            };
            match stream.next().await {
                Ok(Some(StreamItem::Event { seq, event })) => {
                    self.last = Some(seq);
                    self.failures = 0;
                    return Ok(Followed::Event { seq, event });
                }
                Ok(Some(StreamItem::Position(seq))) => self.last = Some(seq),
                Ok(Some(StreamItem::Notice(notice))) => return Ok(Followed::Notice(notice)),
                Ok(Some(StreamItem::End)) => return Ok(Followed::End),
                // Without `flue-end`, a replay was cut short (the gateway stopping, say):
                // resume after the last event like a followed stream does.
                Ok(None) => {
                    if !self.query.follow {
                        self.failures += 1;
                        if self.failures > REPLAY_RECONNECTS {
                            return Err(CliError::Usage(
                                "the gateway kept ending the replay before it caught up".into(),
                            ));
                        }
                    }
                    return Ok(self.drop_stream("the gateway closed the event stream"));
                }
                Err(e) => {
                    let why = super::error_message(&e);
                    let why = why.strip_prefix("error: ").unwrap_or(&why).to_owned();
                    self.failures += 1;
                    if !self.query.follow && self.failures > REPLAY_RECONNECTS {
                        return Err(e.into());
                    }
                    return Ok(self.drop_stream(&why));
                }
            }
        }
    }

    fn drop_stream(&mut self, why: &str) -> Followed {
        self.stream = None;
        Followed::Lost(why.to_owned())
    }

    /// One reconnection attempt after a pause: `Restored` on success, `None` to try again.
    async fn reconnect(&mut self) -> Result<Option<Followed>, CliError> {
        tokio::time::sleep(RECONNECT_PAUSE).await; // the pause between attempts, not a wait for a state
        let mut query = self.query.clone();
        if let Some(seq) = self.last {
            query.start = EventStart::After(seq);
        }
        match self.client.events(&query).await {
            Ok(stream) => {
                self.stream = Some(stream);
                Ok(Some(Followed::Restored))
            }
            Err(e) if transient(&e) => {
                self.failures += 1;
                if !self.query.follow && self.failures > REPLAY_RECONNECTS {
                    return Err(e.into());
                }
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A failure worth retrying: no connection, or the gateway failing (5xx), not a refusal.
fn transient(e: &ClientError) -> bool {
    match e {
        ClientError::Api { status, .. } => *status >= 500,
        ClientError::Unreachable { .. } | ClientError::Http { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_proto::{EventType, TenantId};

    #[test]
    fn lines_are_the_cloud_event_with_an_optional_seq_first() {
        let event = CloudEvent::new(
            EventType::ServerOnline,
            &TenantId::new("t").expect("tenant"),
            "server:s:online:1".into(),
            "servers/s".into(),
            &serde_json::json!({}),
        );
        let plain = json_line(7, &event, false);
        assert!(plain.starts_with("{\"specversion\":\"1.0\""), "{plain}");
        let with = json_line(7, &event, true);
        assert!(with.starts_with("{\"seq\":7,\"specversion\""), "{with}");
        let back: CloudEvent = serde_json::from_str(&with).expect("still a CloudEvent");
        assert_eq!(back, event);
    }
}

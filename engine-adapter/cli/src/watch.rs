//! `flue watch`: a live view of a stack's or a server's deployments. It subscribes to
//! the event stream first, then reads the records (so nothing that changes in between is
//! lost), then applies each event to the view ([`view`]). On a terminal it redraws in
//! place; otherwise it prints one line per change, for logs and scripts.

mod row;
mod view;

use std::io::Write;

use flue_proto::{EventFilter, OpStatus, PresenceStatus};

use super::args::WatchArgs;
use super::events::{Followed, Follower, warn_notice};
use super::{CliError, Outcome};
use flue_client::Client;
use flue_client::events::{EventQuery, EventStart};
use row::{Row, State, Target};
use view::View;

/// Most deployments of a server shown (the newest).
const MAX_SERVER_ROWS: usize = 50;
/// Longest output line shown in the table, in characters.
const MAX_OUTPUT_CHARS: usize = 100;

/// How the view is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Screen {
    /// A terminal: the table is redrawn in place.
    Redraw,
    /// A pipe or a file: one line per change.
    Lines,
}

/// Runs `flue watch`.
pub(crate) async fn run(
    client: &Client,
    args: WatchArgs,
    screen: Screen,
    out: &mut impl Write,
) -> Result<Outcome, CliError> {
    let (target, filter) = match (args.stack, args.server) {
        (Some(stack), _) => (
            Target::Stack(stack.clone()),
            EventFilter {
                stack: Some(stack),
                ..EventFilter::default()
            },
        ),
        (None, Some(server)) => (
            Target::Server(server.clone()),
            EventFilter {
                server: Some(server),
                ..EventFilter::default()
            },
        ),
        (None, None) => return Err(CliError::Usage("give --stack or --server".to_owned())),
    };
    let mut events = Follower::new(
        client,
        EventQuery {
            filter,
            start: EventStart::New,
            follow: true,
        },
    );
    // Subscribed before the records are read: whatever changes in between is in the stream.
    events.connect().await?;
    let mut view = load(client, target).await?;
    let mut display = Display {
        screen,
        drawn: false,
    };
    display.show(&view, &view.summary(), out)?;
    loop {
        if args.until_complete
            && let Some(outcome) = view.finished()
        {
            return Ok(outcome);
        }
        let changes = match events.next().await? {
            Followed::Event { event, .. } => view.apply(&event),
            Followed::Notice(notice) => {
                if screen == Screen::Lines {
                    warn_notice(&notice);
                }
                view.note = Some(format!("{}: {}", notice.code, notice.message));
                Vec::new()
            }
            Followed::Lost(why) => {
                if screen == Screen::Lines {
                    eprintln!("warning: {why}; reconnecting");
                }
                view.note = Some(format!("{why}; reconnecting"));
                Vec::new()
            }
            Followed::Restored => {
                view.note = None;
                Vec::new()
            }
            Followed::End => return Ok(Outcome::Success),
        };
        display.show(&view, &changes, out)?;
    }
}

/// The records the view starts from.
async fn load(client: &Client, target: Target) -> Result<View, CliError> {
    let mut view = View::new(target.clone());
    match target {
        Target::Stack(id) => match client.get_stack(&id).await {
            Ok(stack) => {
                view.set_stack_status(stack.status.to_string(), stack.status.reason.clone());
                if stack.status.status != OpStatus::InProgress {
                    view.ended = Some(match stack.status.status {
                        OpStatus::Failed => Outcome::Failed,
                        _ => Outcome::Success,
                    });
                }
                for (key, unit) in &stack.state.units {
                    view.rows.push(Row::from_unit(key, unit));
                }
            }
            // Not created yet: its events will say when it is.
            Err(e) if e.is_not_found() => view.status = Some("not found (yet)".to_owned()),
            Err(e) => return Err(e.into()),
        },
        Target::Server(id) => {
            let server = client.get_server(&id).await?;
            if let Some(presence) = server.presence {
                let status = match presence.status {
                    PresenceStatus::Online => "online",
                    PresenceStatus::Offline => "offline",
                    PresenceStatus::Unknown => "presence unknown",
                };
                view.status = Some(status.to_owned());
                view.reason = presence.reason;
            }
            let deployments = client.list_server_deployments(&id).await?;
            let skip = deployments.len().saturating_sub(MAX_SERVER_ROWS);
            for d in deployments.iter().skip(skip) {
                view.rows.push(Row::from_deployment(d));
            }
        }
    }
    Ok(view)
}

/// Draws the view: the whole table on a terminal, the change lines otherwise.
struct Display {
    screen: Screen,
    drawn: bool,
}

impl Display {
    fn show(
        &mut self,
        view: &View,
        changes: &[String],
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        match self.screen {
            Screen::Lines => {
                for line in changes {
                    writeln!(out, "{}", printable(line))?;
                }
            }
            Screen::Redraw => {
                if !self.drawn {
                    // Clear the screen once; later frames overwrite line by line (no flicker).
                    write!(out, "\x1b[2J")?;
                    self.drawn = true;
                }
                write!(out, "\x1b[H")?;
                for line in table(view).lines() {
                    writeln!(out, "{line}\x1b[K")?;
                }
                write!(out, "\x1b[J")?;
            }
        }
        out.flush()
    }
}

/// The terminal frame: title, note, then one row per deployment.
fn table(view: &View) -> String {
    let mut text = view.title();
    text.push('\n');
    if let Some(note) = &view.note {
        text.push_str(&format!("! {note}\n"));
    }
    text.push('\n');
    let first = match view.target {
        Target::Stack(_) => "UNIT",
        Target::Server(_) => "DEPLOYMENT",
    };
    let header = [first, "SERVER", "ACTION", "STATE", "OUTPUT"].map(str::to_owned);
    let rows: Vec<[String; 5]> = view
        .rows
        .iter()
        .map(|r| {
            let output = match (&r.state, &r.reason) {
                (State::Failed, Some(reason)) => reason.clone(),
                _ => r.output.clone().unwrap_or_default(),
            };
            [
                r.key.clone(),
                r.server
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                r.action.clone(),
                r.state.to_string(),
                cut(&output, MAX_OUTPUT_CHARS),
            ]
        })
        .collect();
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    printable(&text)
}

/// `text` safe to print on a terminal: a hook's output or a failure reason may hold
/// escape sequences (colours, a window title, cursor moves) or tabs and carriage
/// returns, which would garble the table or take over the terminal. Tabs and carriage
/// returns become spaces, other control characters `�`, one for one (so the columns
/// stay aligned); newlines are kept.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' => c,
            '\t' | '\r' => ' ',
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// The first `max` characters of one line of `text`, marked when cut.
fn cut(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests;

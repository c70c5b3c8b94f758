//! The words an operation's progress is printed in: one line (or block) per driver
//! [`Event`], shared by `flue stack …` and the gateway's engine workers, so an operation
//! reads the same wherever it ran.

use std::fmt::Write as _;

use flue_proto::StackId;

use crate::driver::Event;

/// One progress line (or block) for an event.
pub fn line(stack: &StackId, e: &Event) -> String {
    match e {
        Event::OperationStarted { action, resumed } => {
            if *resumed {
                format!("stack {stack}: resuming the interrupted {action}\n")
            } else {
                format!("stack {stack}: {action}_IN_PROGRESS\n")
            }
        }
        Event::Deployment {
            unit,
            action,
            server,
            deployment,
            status,
            reason,
        } => {
            let mut line = format!(
                "  {unit:<24} {action:<8} {:<11} server {server}, deployment {deployment}",
                status.to_string()
            );
            if let Some(r) = reason {
                let _ = write!(line, ": {r}");
            }
            line.push('\n');
            line
        }
        Event::Mapped { resource, note } => format!("  {resource}: {note}\n"),
        Event::Unchanged { unit } => format!("  {unit:<24} unchanged, not run\n"),
        Event::AlreadyDone { unit, status } => {
            format!("  {unit:<24} already {status} before the interruption\n")
        }
        Event::NotRun { unit, reason } => format!("  {unit:<24} {reason}\n"),
        Event::InputsChanged { unit, inputs } => {
            format!("  {unit:<24} inputs changed: {}\n", inputs.join(", "))
        }
        Event::Removed { unit } => format!("  {unit:<24} removed from the stack\n"),
        Event::WaitingForDriver { driver, up_to } => format!(
            "  the operation is marked as driven by {driver}; waiting up to {}s for it to stop\n",
            up_to.as_secs().max(1)
        ),
        Event::Pausing {
            group,
            batch,
            pause,
        } => format!(
            "  {group}: pausing {:.1}s before batch {}\n",
            pause.as_secs_f64(),
            batch + 1
        ),
        Event::OperationFinished { status } => {
            let mut text = format!("stack {stack}: {status}\n");
            if let Some(reason) = &status.reason {
                for line in reason.lines() {
                    let _ = writeln!(text, "  {line}");
                }
            }
            text
        }
    }
}

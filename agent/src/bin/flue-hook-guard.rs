//! `flue-hook-guard --agent-pid <pid> -- <hook> [<arg>…]`: the leader of every hook's
//! process group, which kills the group when its agent dies (see `flue_agent::guard`).
//! Internal: only the agent starts it. A binary of its own so that starting it loads
//! only the guard's code and std, not the agent's runtime and clients.

use std::process::ExitCode;

fn main() -> ExitCode {
    flue_agent::guard::main(std::env::args_os().skip(1))
}

//! The sizes of the futures of the store's and the domain operations' busiest calls, printed
//! (`cargo test -p flue-gateway future_sizes -- --nocapture`) and bounded: a debug-built
//! test thread keeps a whole `#[tokio::test]` future on its 2 MiB stack.

use std::mem::size_of;

use flue_proto::{CreateDeployment, DeploymentId, RegisterServer, TenantId};

use crate::deployments::Accept;
use crate::record::DeploymentRecord;
use crate::servers::Servers;
use crate::store::Store;

/// The size of what `f` returns, without calling it.
fn returned<A, F: FnOnce(A) -> R, R>(_: &F) -> usize {
    size_of::<R>()
}

#[test]
fn futures_stay_small() {
    let sizes = [
        (
            "Accept::accept",
            returned(&|(a, b): (&Accept, CreateDeployment)| a.accept(b)),
        ),
        (
            "Servers::register",
            returned(&|(s, b): (&Servers, RegisterServer)| s.register(b)),
        ),
        (
            "store: create a deployment",
            returned(&|(s, r): (&Store, &DeploymentRecord)| s.deployments.create(r)),
        ),
        (
            "store: update a deployment",
            returned(&|(s, t, id): (&Store, &TenantId, &DeploymentId)| {
                s.deployments.update(t, id, |_| false)
            }),
        ),
    ];
    for (name, size) in sizes {
        println!("{name}: {size} bytes");
    }
}

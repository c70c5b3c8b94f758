//! The sizes of the store's handles and of the futures of the busiest store and domain
//! calls, printed (`cargo test -p flue-gateway future_sizes -- --nocapture`) and bounded:
//! a debug-built test thread keeps a whole `#[tokio::test]` future on its 2 MiB stack, and
//! every task and handler carries its handles by value.

use std::mem::size_of;

use flue_proto::{CreateDeployment, DeploymentId, RegisterServer, TenantId};

use crate::deployments::Accept;
use crate::record::DeploymentRecord;
use crate::servers::Servers;
use crate::service::Shared;
use crate::store::{Deployments, Store};

/// The size of what `f` returns, without calling it.
fn returned<A, F: FnOnce(A) -> R, R>(_: &F) -> usize {
    size_of::<R>()
}

#[test]
fn store_handles_and_futures_stay_small() {
    let handles = [
        ("Store", size_of::<Store>(), 512),
        ("store::Deployments", size_of::<Deployments>(), 128),
        ("service::Shared", size_of::<Shared>(), 16 << 10),
    ];
    let futures = [
        (
            "Accept::accept",
            returned(&|(a, b): (&Accept, CreateDeployment)| a.accept(b)),
            12 << 10,
        ),
        (
            "Servers::register",
            returned(&|(s, b): (&Servers, RegisterServer)| s.register(b)),
            10 << 10,
        ),
        (
            "Deployments::create",
            returned(&|(d, r): (&Deployments, &DeploymentRecord)| d.create(r)),
            2 << 10,
        ),
        (
            "Deployments::update",
            returned(&|(d, t, id): (&Deployments, &TenantId, &DeploymentId)| {
                d.update(t, id, |_| false)
            }),
            4 << 10,
        ),
    ];
    for (name, size, bound) in handles.into_iter().chain(futures) {
        println!("{name}: {size} bytes");
        assert!(
            size <= bound,
            "{name} takes {size} bytes, more than {bound}"
        );
    }
}

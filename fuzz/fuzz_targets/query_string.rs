//! The gateway's query strings, read the way its handlers read them: axum's `Query`
//! from the request URI, then the handler's own checks. The first byte picks the
//! endpoint; for `/v1/events` the input after a NUL byte is the `Last-Event-ID` header.
#![no_main]

use axum::extract::Query;
use axum::http::Uri;
use flue_fuzz::assert_id;
use flue_gateway::api::deployments::{ListQuery, WaitQuery};
use flue_gateway::api::events;
use flue_gateway::api::stacks::DeleteQuery;
use flue_proto::{ServerId, StackId, TenantId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let (query, header) = match rest.iter().position(|&b| b == 0) {
        Some(nul) => (&rest[..nul], Some(&rest[nul + 1..])),
        None => (rest, None),
    };
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    // What hyper accepts as a request target is all a handler can ever see.
    let Ok(uri) = format!("/v1/x?{query}").parse::<Uri>() else {
        return;
    };
    match which % 4 {
        0 => {
            let Ok(Query(pairs)) = Query::<Vec<(String, String)>>::try_from_uri(&uri) else {
                return;
            };
            // As the handler reads the header: lossy, trimmed, empty means none.
            let header = header
                .map(|h| String::from_utf8_lossy(h).trim().to_owned())
                .filter(|h| !h.is_empty());
            let Ok(parsed) = events::parse(&pairs, header.as_deref()) else {
                return;
            };
            let filter = parsed.filter;
            for id in [
                filter.server.as_ref().map(ServerId::as_str),
                filter.stack.as_ref().map(StackId::as_str),
                filter.deployment.as_ref().map(|d| d.as_str()),
            ]
            .into_iter()
            .flatten()
            {
                assert_id(id);
            }
            // The broker filter built from the query: wildcards only where the
            // gateway put them, never from the client's text.
            let tenant = TenantId::new("t").expect("valid");
            let subject = filter.subject_filter(&tenant);
            assert!(
                subject
                    .split('.')
                    .all(|t| t == "*" || (!t.is_empty() && !t.contains(['*', '>', ' ']))),
                "{subject:?}"
            );
        }
        1 => {
            let _ = Query::<WaitQuery>::try_from_uri(&uri);
        }
        2 => {
            let Ok(Query(list)) = Query::<ListQuery>::try_from_uri(&uri) else {
                return;
            };
            // The handler's checks of each parameter (`deployments::list`).
            if let Some(server) = list.server.as_deref().filter(|s| !s.is_empty())
                && let Ok(id) = server.parse::<ServerId>()
            {
                assert_id(id.as_str());
            }
            if let Some(stack) = list.stack.as_deref().filter(|s| !s.is_empty())
                && let Ok(id) = stack.parse::<StackId>()
            {
                assert_id(id.as_str());
            }
        }
        _ => {
            let _ = Query::<DeleteQuery>::try_from_uri(&uri);
        }
    }
});

//! A deployment group's `update_policy`: how many members run at once, and the pause
//! between batches.

use std::time::Duration;

use serde_json::Value;

use super::{Batching, TemplateError, UpdatePolicy, check_keys};

pub(super) fn parse_update_policy(
    policy: &Value,
    path: &str,
) -> Result<UpdatePolicy, TemplateError> {
    let Value::Object(policy) = policy else {
        return Err(TemplateError::new(
            path,
            "must be a map with batch_create and/or rolling_update",
        ));
    };
    check_keys(policy, path, &["batch_create", "rolling_update"])?;
    let batching = |key: &str| match policy.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => parse_batching(v, &format!("{path}.{key}"), key == "rolling_update").map(Some),
    };
    Ok(UpdatePolicy {
        batch_create: batching("batch_create")?,
        rolling_update: batching("rolling_update")?,
    })
}

fn parse_batching(value: &Value, path: &str, rolling: bool) -> Result<Batching, TemplateError> {
    let Value::Object(map) = value else {
        return Err(TemplateError::new(
            path,
            "must be a map with max_batch_size and pause_time",
        ));
    };
    // Heat keeps a minimum in service during a rolling update only.
    if rolling {
        check_keys(
            map,
            path,
            &["max_batch_size", "pause_time", "min_in_service"],
        )?;
    } else {
        check_keys(map, path, &["max_batch_size", "pause_time"])?;
    }
    let max_batch_size = match map.get("max_batch_size") {
        None => 1,
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                TemplateError::new(
                    format!("{path}.max_batch_size"),
                    "must be a whole number of at least 1",
                )
            })?,
    };
    let pause_time = match map.get("pause_time") {
        None => Duration::ZERO,
        Some(v) => v
            .as_f64()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| {
                TemplateError::new(
                    format!("{path}.pause_time"),
                    "must be a number of seconds, 0 or more",
                )
            })?,
    };
    let min_in_service = match map.get("min_in_service") {
        None => 0,
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                TemplateError::new(
                    format!("{path}.min_in_service"),
                    "must be a whole number, 0 or more",
                )
            })?,
    };
    Ok(Batching {
        max_batch_size,
        pause_time,
        min_in_service,
    })
}

//! The classic Prometheus text format (0.0.4), for scrapers that ask for `text/plain`:
//! the OpenMetrics text [`super::exposition`] writes, rewritten where the two differ.
//!
//! `prometheus-client` writes OpenMetrics only. For the families this gateway writes
//! (counters, gauges and histograms; no exemplars, no `_created` samples, fixed help
//! texts without escapes) the formats differ in three places, all on comment lines: a
//! counter's `# HELP` and `# TYPE` name the family (`flue_deployments`) where classic
//! parsers expect the sample name (`flue_deployments_total`); `# UNIT` lines exist only
//! in OpenMetrics; so does the final `# EOF`. Sample lines are the same in both.

/// The content type of [`classic`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The classic text of an OpenMetrics exposition written by [`super::exposition`].
pub fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 8 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        if let Some((prefix, rest)) = descriptor {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                out.push_str(prefix);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(tail);
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_described_by_their_sample_name_and_openmetrics_lines_go() {
        let openmetrics = "\
# HELP flue_deployments Deployments that reached each status
# TYPE flue_deployments counter
flue_deployments_total{tenant=\"a\"} 1
# HELP flue_servers Servers
# TYPE flue_servers gauge
flue_servers{tenant=\"a\"} 2
# HELP flue_deployment_duration_seconds Time
# TYPE flue_deployment_duration_seconds histogram
# UNIT flue_deployment_duration_seconds seconds
flue_deployment_duration_seconds_count{tenant=\"a\"} 1
# EOF
";
        assert_eq!(
            classic(openmetrics),
            "\
# HELP flue_deployments_total Deployments that reached each status
# TYPE flue_deployments_total counter
flue_deployments_total{tenant=\"a\"} 1
# HELP flue_servers Servers
# TYPE flue_servers gauge
flue_servers{tenant=\"a\"} 2
# HELP flue_deployment_duration_seconds Time
# TYPE flue_deployment_duration_seconds histogram
flue_deployment_duration_seconds_count{tenant=\"a\"} 1
"
        );
    }
}

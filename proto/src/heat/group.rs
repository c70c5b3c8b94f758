//! Hook groups as heat-agents' dispatcher (`55-heat-config`) reads them: which hook file
//! a group names, and what becomes of a config whose group has no hook.
//!
//! The dispatcher looks for a hook named after the group with every character but letters,
//! digits, `-` and `_` dropped (`Heat::Ungrouped` → `HeatUngrouped`). When there is none it
//! skips the config and signals nothing: under Heat the deployment then completes only
//! with `signal_transport: NO_SIGNAL` and otherwise waits for its timeout. The groups of
//! [`DATA_GROUPS`] expect no hook: os-collect-config hands their configs to os-apply-config
//! as data (the dispatcher does not even log a missing hook for `os-apply-config`).

/// Heat's group for a config that names none (`OS::Heat::SoftwareConfig`'s default, and
/// the group of the config Heat derives for a deployment whose config has no group).
pub const UNGROUPED: &str = "Heat::Ungrouped";

/// The groups whose configs are data rather than work for a hook: a deployment of one
/// with no hook installed completes without running anything.
pub const DATA_GROUPS: [&str; 2] = [UNGROUPED, "os-apply-config"];

/// True for a group of [`DATA_GROUPS`].
pub fn is_data_group(group: &str) -> bool {
    DATA_GROUPS.contains(&group)
}

/// The file name the dispatcher looks up in its hook dirs for `group`: the group with
/// every character that is not alphanumeric, `-` or `_` dropped. It never holds a path
/// separator or a dot, so it names a file inside the dir.
pub fn hook_name(group: &str) -> String {
    group
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_name_is_the_group_as_the_dispatcher_sanitises_it() {
        assert_eq!(hook_name(UNGROUPED), "HeatUngrouped");
        assert_eq!(hook_name("json-file"), "json-file");
        assert_eq!(hook_name("my_hook.v2"), "my_hookv2");
        assert_eq!(hook_name("../x"), "x");
        assert_eq!(hook_name("::"), "");
    }

    #[test]
    fn ungrouped_and_os_apply_config_are_data() {
        assert!(is_data_group("Heat::Ungrouped"));
        assert!(is_data_group("os-apply-config"));
        assert!(!is_data_group("script"));
        assert!(!is_data_group("HeatUngrouped"));
    }
}

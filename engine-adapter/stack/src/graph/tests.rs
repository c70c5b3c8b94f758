use std::path::Path;

use super::*;

fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    edges
        .iter()
        .map(|(n, ds)| {
            (
                (*n).to_owned(),
                ds.iter().map(|d| (*d).to_owned()).collect(),
            )
        })
        .collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn order_puts_dependencies_first_and_ties_alphabetically() {
    let g = graph(&[("c", &["a"]), ("b", &[]), ("a", &[]), ("d", &["c", "b"])]);
    assert_eq!(topological_order(&g), Ok(names(&["a", "b", "c", "d"])));
    let g = graph(&[("z", &[]), ("y", &["z"]), ("x", &[])]);
    assert_eq!(topological_order(&g), Ok(names(&["x", "z", "y"])));
}

#[test]
fn names_that_are_not_nodes_are_ignored() {
    let g = graph(&[("a", &["elsewhere"])]);
    assert_eq!(topological_order(&g), Ok(names(&["a"])));
}

#[test]
fn a_cycle_is_reported_from_its_smallest_name() {
    let g = graph(&[("c", &["a"]), ("b", &["c"]), ("a", &["b"]), ("d", &["a"])]);
    assert_eq!(topological_order(&g), Err(names(&["a", "b", "c", "a"])));
    // Only the cycle, not what merely waits for it.
    let g = graph(&[("x", &["m"]), ("m", &["n"]), ("n", &["m"]), ("free", &[])]);
    assert_eq!(topological_order(&g), Err(names(&["m", "n", "m"])));
    let g = graph(&[("self", &["self"])]);
    assert_eq!(topological_order(&g), Err(names(&["self", "self"])));
}

#[test]
fn dependents_inverts_the_graph() {
    let g = graph(&[("a", &[]), ("b", &["a"]), ("c", &["a", "b", "gone"])]);
    let r = dependents(&g);
    assert_eq!(r["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert_eq!(r["b"], BTreeSet::from(["c".to_owned()]));
    assert!(r["c"].is_empty());
    assert!(!r.contains_key("gone"));
}

/// The classic case: config1 and config2 on server1, config3 on server2; config2
/// depends on config3, config3 on config1.
const CLASSIC: &str = r#"
heat_template_version: 2018-08-31
resources:
  server1: {type: OS::Flue::Server, properties: {server_id: s1}}
  server2: {type: OS::Flue::Server, properties: {server_id: s2}}
  config1: {type: OS::Heat::SoftwareConfig, properties: {config: "echo 1"}}
  config2: {type: OS::Heat::SoftwareConfig, properties: {config: "echo 2"}}
  config3:
    type: OS::Heat::SoftwareConfig
    properties:
      config: "echo 3"
      outputs: [{name: done}]
  deploy1:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: config1}, server: {get_resource: server1}}
  deploy3:
    type: OS::Heat::SoftwareDeployment
    depends_on: deploy1
    properties: {config: {get_resource: config3}, server: {get_resource: server2}}
  deploy2:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config2}
      server: {get_resource: server1}
      input_values: {x: {get_attr: [deploy3, done]}}
"#;

#[test]
fn dependencies_combine_depends_on_and_references() {
    let t = Template::parse(CLASSIC, Path::new(".")).expect("valid");
    let deps = dependencies(&t);
    let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(deps["deploy1"], set(&["config1", "server1"]));
    assert_eq!(deps["deploy3"], set(&["config3", "deploy1", "server2"]));
    assert_eq!(deps["deploy2"], set(&["config2", "deploy3", "server1"]));
    assert!(deps["config1"].is_empty());
    let order = topological_order(&deps).expect("no cycle");
    let pos = |n: &str| order.iter().position(|x| x == n).expect("present");
    assert!(pos("deploy1") < pos("deploy3"));
    assert!(pos("deploy3") < pos("deploy2"));
    assert_eq!(order.len(), t.resources.len());
}

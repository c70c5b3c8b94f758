//! A HOT template as `flue stack create` reads it: parsed and checked
//! (`Template::parse`), its parameters bound from `-P name=value` strings, and expanded
//! into units. The input is the template text, then optionally a NUL byte and one
//! `name=value` parameter per line.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use flue_stack::template::Template;
use flue_stack::units;
use flue_fuzz::assert_id;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, params) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(template) = Template::parse(text, files_dir()) else {
        return;
    };
    let given: BTreeMap<String, String> = String::from_utf8_lossy(params)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let Ok(params) = template.bind_parameters(&given) else {
        return;
    };
    // Kept values stand in for parameters not given, as on an update.
    let _ = template.bind_parameters_over(&BTreeMap::new(), &params.to_keep());
    for creating in [true, false] {
        let Ok(plan) = units::expand(&template, &params, creating) else {
            continue;
        };
        for unit in plan.units.values() {
            assert_id(unit.server_id.as_str());
            for dep in &unit.depends_on {
                assert!(
                    plan.units.contains_key(dep),
                    "unit {} waits for unknown {dep}",
                    unit.key
                );
            }
        }
    }
});

/// The directory `get_file` reads from: the files the example stacks name, so that
/// their seeds load; written once per process.
fn files_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("flue-fuzz-files");
        std::fs::create_dir_all(&dir).expect("create the get_file directory");
        for name in [
            "step.sh",
            "db.sh",
            "db-lifecycle.sh",
            "db-backup.sh",
            "web.sh",
        ] {
            std::fs::write(dir.join(name), "#!/bin/sh\necho ok\n").expect("write a get_file file");
        }
        std::fs::write(dir.join("facts.json"), "{\"a\": 1}\n").expect("write a get_file file");
        dir
    })
}

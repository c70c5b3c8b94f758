//! A polling server's stock tools (os-collect-config, os-refresh-config, os-apply-config,
//! heat-agents' `55-heat-config`, `heat-config-notify` and `script` hook), laid out in a
//! temp dir so that nothing is written to /etc or /var of the machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// heat-agents' version whose sdist `scripts/test.sh` unpacks into `.venv/share`.
const HEAT_AGENTS: &str = "heat_agents-13.0.0";

/// The stock Heat tools a polling server runs, as `scripts/test.sh` installs them.
pub struct StockTools {
    /// `.venv/bin` (os-collect-config, os-refresh-config, os-apply-config, python3).
    pub bin: PathBuf,
    /// The unpacked heat-agents sdist.
    pub heat_agents: PathBuf,
}

impl StockTools {
    /// Finds them, or fails saying how to install them.
    pub fn find() -> StockTools {
        let venv = crate::repo_root().join(".venv");
        let bin = venv.join("bin");
        let heat_agents = venv.join("share").join(HEAT_AGENTS);
        let needed = [
            bin.join("os-collect-config"),
            bin.join("os-refresh-config"),
            bin.join("os-apply-config"),
            heat_agents.join("heat-config/bin/heat-config-notify"),
            heat_agents.join("heat-config/os-refresh-config/configure.d/55-heat-config"),
            heat_agents.join("heat-config-script/install.d/hook-script.py"),
        ];
        for path in &needed {
            assert!(
                path.exists(),
                "{} is missing: run `bash scripts/test.sh` (it installs os-collect-config, \
                 os-refresh-config and os-apply-config 14.1.0 into .venv and unpacks \
                 heat-agents 13.0.0 into .venv/share)",
                path.display()
            );
        }
        StockTools { bin, heat_agents }
    }
}

/// A polling server's file system in a temp dir: where the stock tools keep their
/// state, so that nothing is written to /etc or /var of the machine.
pub struct PolledServer {
    root: PathBuf,
    config_file: PathBuf,
    tools: StockTools,
}

impl PolledServer {
    /// Lays out the tools' directories under `root`, with os-collect-config polling
    /// `metadata_url` and running os-refresh-config on a change.
    ///
    /// The image's files are the stock ones: heat-config's `55-heat-config`, its
    /// os-apply-config templates, the `script` hook and heat-config-notify. Only the paths
    /// differ: `20-os-apply-config` (stock: `exec os-apply-config`) is given `--output` so
    /// that it renders into `root`, and each tool is pointed there by its own variable
    /// (os-refresh-config: `OS_REFRESH_CONFIG_BASE_DIR`).
    pub fn new(root: &Path, metadata_url: &str) -> PolledServer {
        let tools = StockTools::find();
        let orc = root.join("os-refresh-config/configure.d");
        let hooks = root.join("hooks");
        for dir in [&orc, &hooks, &root.join("out")] {
            std::fs::create_dir_all(dir).expect("dir");
        }
        let element = tools.heat_agents.join("heat-config");
        crate::write_executable(
            &orc.join("20-os-apply-config"),
            &format!(
                "#!/bin/bash\nset -ue\nexec os-apply-config --output '{}'\n",
                root.join("out").display()
            ),
        );
        copy_executable(
            &element.join("os-refresh-config/configure.d/55-heat-config"),
            &orc.join("55-heat-config"),
        );
        copy_executable(
            &tools
                .heat_agents
                .join("heat-config-script/install.d/hook-script.py"),
            &hooks.join("script"),
        );
        let config_file = root.join("os-collect-config.conf");
        std::fs::write(
            &config_file,
            format!(
                "[DEFAULT]\ncommand = os-refresh-config --lockfile {lock}\n\
                 collectors = request\ncachedir = {cache}\nbackup-cachedir = {backup}\n\n\
                 [request]\nmetadata_url = {metadata_url}\n",
                lock = root.join("os-refresh-config.lock").display(),
                cache = root.join("occ-cache").display(),
                backup = root.join("occ-backup").display(),
            ),
        )
        .expect("os-collect-config.conf");
        PolledServer {
            root: root.to_owned(),
            config_file,
            tools,
        }
    }

    /// Where 55-heat-config records what it deployed.
    pub fn deployed(&self) -> PathBuf {
        self.root.join("deployed")
    }

    /// The command of one stock poll cycle (`os-collect-config --one-time`); without
    /// `--one-time` it polls on, every `--polling-interval` seconds.
    pub fn poll_command(&self) -> tokio::process::Command {
        let element = self.tools.heat_agents.join("heat-config");
        let path = format!(
            "{}:{}",
            self.tools.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = tokio::process::Command::new(self.tools.bin.join("os-collect-config"));
        command
            .arg("--config-file")
            .arg(&self.config_file)
            .env("PATH", path)
            .env(
                "OS_REFRESH_CONFIG_BASE_DIR",
                self.root.join("os-refresh-config"),
            )
            .env(
                "OS_CONFIG_APPLIER_TEMPLATES",
                element.join("os-apply-config"),
            )
            .env(
                "HEAT_SHELL_CONFIG",
                self.root.join("out/var/run/heat-config/heat-config"),
            )
            .env("HEAT_CONFIG_DEPLOYED", self.deployed())
            .env("HEAT_CONFIG_DEPLOYED_OLD", self.root.join("deployed-old"))
            .env("HEAT_CONFIG_HOOKS", self.root.join("hooks"))
            .env("HEAT_CONFIG_NOTIFY", element.join("bin/heat-config-notify"))
            .env("HEAT_SCRIPT_WORKING", self.root.join("script-work"))
            .env("HEAT_SCRIPT_OUTPUTS", self.root.join("script-out"))
            .kill_on_drop(true);
        command
    }

    /// Runs one poll cycle to its end; returns its combined output (for failure messages).
    pub async fn poll_once(&self) -> String {
        let output = tokio::time::timeout(
            Duration::from_secs(120),
            self.poll_command().arg("--one-time").output(),
        )
        .await
        .expect("one poll cycle within 2 minutes")
        .expect("os-collect-config runs");
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "os-collect-config failed:\n{text}");
        text
    }
}

fn copy_executable(from: &Path, to: &Path) {
    let text = std::fs::read_to_string(from).expect("stock file");
    crate::write_executable(to, &text);
}

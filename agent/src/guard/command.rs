//! The hook's command as a guard started [`AHEAD`](super::AHEAD) gets it from the agent,
//! right after the go: encoded by the agent, read back exactly by the guard (std only, as
//! the rest of the guard).

use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Longest [`HookCommand`] a guard reads (its environment holds a `script` hook's inputs).
const MAX_COMMAND_BYTES: u32 = 64 << 20;

/// What a guard started [`AHEAD`](super::AHEAD) runs, sent by the agent right after the go: the hook
/// command's program, arguments, environment changes and working directory (all a hook
/// command sets), so that the hook runs exactly as the agent's command describes it.
///
/// On the pipe: its length (4 bytes, big-endian), then one record per item, each a tag
/// byte and its bytes ended by a NUL (none can hold one: `exec` takes C strings):
/// `P` the program, `A` an argument, `E` a variable set (`name=value`, split at the first
/// `=`), `R` a variable removed, `D` the working directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookCommand {
    /// The hook.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables set (`Some`) or removed (`None`) from the guard's own environment.
    pub envs: Vec<(OsString, Option<OsString>)>,
    /// Its working directory, when not the guard's.
    pub dir: Option<PathBuf>,
}

impl HookCommand {
    /// What `cmd` would run.
    pub fn of(cmd: &std::process::Command) -> Self {
        Self {
            program: cmd.get_program().to_owned(),
            args: cmd.get_args().map(OsStr::to_owned).collect(),
            envs: cmd
                .get_envs()
                .map(|(name, value)| (name.to_owned(), value.map(OsStr::to_owned)))
                .collect(),
            dir: cmd.get_current_dir().map(Path::to_owned),
        }
    }

    /// The command to spawn: stdin, stdout and stderr inherited from the guard.
    pub fn command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.program);
        cmd.args(&self.args);
        for (name, value) in &self.envs {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// The bytes the agent sends after the go; `None` when a part holds a NUL (no
    /// `exec` could take it) or the whole is too long.
    pub fn encode(&self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        let mut record = |tag: u8, parts: &[&OsStr]| {
            body.push(tag);
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    body.push(b'=');
                }
                body.extend_from_slice(part.as_bytes());
            }
            body.push(0);
        };
        record(b'P', &[&self.program]);
        for arg in &self.args {
            record(b'A', &[arg]);
        }
        for (name, value) in &self.envs {
            match value {
                Some(value) => record(b'E', &[name, value]),
                None => record(b'R', &[name]),
            }
        }
        if let Some(dir) = &self.dir {
            record(b'D', &[dir.as_os_str()]);
        }
        let parts = 1 + self.args.len() + self.envs.len() + usize::from(self.dir.is_some());
        let nul_free = body.iter().filter(|&&b| b == 0).count() == parts;
        let len = u32::try_from(body.len())
            .ok()
            .filter(|&len| len <= MAX_COMMAND_BYTES && nul_free)?;
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&body);
        Some(bytes)
    }

    /// Reads exactly one encoded command from `r` (not a byte more: the rest is the
    /// hook's stdin).
    pub fn read(r: &mut impl Read) -> io::Result<Self> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let mut len = [0u8; 4];
        r.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len);
        if len > MAX_COMMAND_BYTES {
            return Err(bad("hook command too long"));
        }
        let mut body = vec![0u8; len as usize];
        r.read_exact(&mut body)?;
        let Some(body) = body.strip_suffix(&[0]) else {
            return Err(bad("hook command not ended"));
        };
        let mut command = Self::default();
        let mut program = None;
        for record in body.split(|&b| b == 0) {
            let Some((&tag, bytes)) = record.split_first() else {
                return Err(bad("empty record in the hook command"));
            };
            let text = || OsString::from_vec(bytes.to_vec());
            match tag {
                b'P' => program = Some(text()),
                b'A' => command.args.push(text()),
                b'E' => {
                    let at = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
                    let value = bytes.get(at + 1..).unwrap_or_default();
                    command.envs.push((
                        OsString::from_vec(bytes[..at].to_vec()),
                        Some(OsString::from_vec(value.to_vec())),
                    ));
                }
                b'R' => command.envs.push((text(), None)),
                b'D' => command.dir = Some(PathBuf::from(text())),
                _ => return Err(bad("unknown record in the hook command")),
            }
        }
        command.program = program.ok_or_else(|| bad("no program in the hook command"))?;
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_command_reads_back_exactly_as_sent_and_not_a_byte_more() {
        let mut hook = std::process::Command::new("/hooks/script");
        hook.arg("-x")
            .arg("")
            .arg("a b=c")
            .env("A", "1")
            .env("EMPTY", "")
            .env("EQ", "x=y")
            .env_remove("FLUE_NATS_URL")
            .current_dir("/work");
        let sent = HookCommand::of(&hook);
        let mut bytes = sent.encode().expect("encodes");
        bytes.extend_from_slice(b"{\"item\": 1}");
        let mut pipe = io::Cursor::new(bytes);
        let read = HookCommand::read(&mut pipe).expect("reads");
        assert_eq!(read, sent);
        let mut rest = String::new();
        pipe.read_to_string(&mut rest).expect("rest");
        assert_eq!(rest, "{\"item\": 1}", "the hook's stdin is left whole");
        let rebuilt = read.command();
        assert_eq!(HookCommand::of(&rebuilt), sent);
        // Nothing `exec` could not take is sent.
        let nul = HookCommand {
            program: OsString::from("/hook"),
            args: vec![OsString::from_vec(b"a\0b".to_vec())],
            ..HookCommand::default()
        };
        assert_eq!(nul.encode(), None);
        // A truncated command is an error, not a hook.
        let short = sent.encode().expect("encodes");
        let cut = HookCommand::read(&mut io::Cursor::new(&short[..short.len() - 1]));
        assert!(cut.is_err());
    }
}

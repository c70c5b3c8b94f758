//! The `flue` command's exit codes, and the "Exit codes:" section of `flue --help`, made
//! from them (a test compares that section with these constants and with what each
//! outcome and error returns).

/// The command did what it was asked (`stack check`: nothing drifted).
pub const SUCCESS: u8 = 0;
/// It ran to its end and found a failure: a deployment or stack operation it waited for
/// ended FAILED; `stack check` found a unit drifted, missing or on an offline server;
/// `stack validate` found the template wrong; `deployment show --output` named an output
/// the deployment lacks or a hidden one.
pub const FAILED: u8 = 1;
/// It could not do what it was asked: a usage error (clap's own too), the gateway refused
/// the request or could not be reached, a file could not be read or written.
pub const ERROR: u8 = 2;

/// Each code with what it means, in the order `flue --help` lists them.
pub const CODES: [(u8, &str); 3] = [
    (
        SUCCESS,
        "success (stack check: nothing drifted; converge: nothing needed it or it completed)",
    ),
    (
        FAILED,
        "a deployment or stack operation waited for ended FAILED; stack check found a unit drifted, missing or on an offline server; stack validate found the template wrong; deployment show --output named an output the deployment lacks or a hidden one",
    ),
    (
        ERROR,
        "usage error, the gateway refused the request or could not be reached (--gateway / FLUE_GATEWAY_URL, --token / FLUE_TOKEN), or a file could not be read or written",
    ),
];

/// The "Exit codes:" section of `flue --help`.
pub fn help() -> String {
    let mut text = String::from("Exit codes:\n");
    for (code, meaning) in CODES {
        text.push_str(&format!("  {code}  {meaning}\n"));
    }
    text
}

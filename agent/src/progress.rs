//! Live progress: a running hook's output lines, batched and bounded (work in progress).

//! Standard output. A reader that goes away (`cutoverctl list | head -1`) ends the program as
//! SIGPIPE would (exit 141), with no panic and never as a success: a drain script may test the
//! exit code of `wait` through a pipe.

use std::io::Write;

/// The exit code of a process killed by SIGPIPE (128 + 13), as shells report it.
pub const CLOSED: i32 = 141;

/// Writes `text` and flushes; a closed or failing stdout ends the program.
pub fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(CLOSED);
        }
        eprintln!("cutoverctl: cannot write to stdout: {e}");
        std::process::exit(2);
    }
}

/// [`print`] with a newline.
pub fn line(text: &str) {
    print(&format!("{text}\n"));
}

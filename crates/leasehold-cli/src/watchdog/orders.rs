//! The control pipe, which `leasehold` writes and the watchdog reads.

use std::fs::File;
use std::io::Read;

/// The control pipe, read a line at a time.
pub struct Orders {
    pub pipe: File,
    /// Bytes read and not yet taken as lines.
    buf: Vec<u8>,
}

impl Orders {
    pub fn new(pipe: File) -> Self {
        Orders {
            pipe,
            buf: Vec::new(),
        }
    }

    /// The next whole line, blocking; `None` at end of file or on error.
    pub fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(line) = self.buffered_line() {
                return Some(line);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// A whole line already read, if any.
    pub fn buffered_line(&mut self) -> Option<String> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(String::from_utf8_lossy(&line[..end]).into_owned())
    }

    /// Reads what the pipe has; false at end of file or on error.
    pub fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 512];
        loop {
            match self.pipe.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }
}

//! A resumable JSON tokenizer that reports byte offsets and never builds a tree. Pure.
//!
//! A 5,000-node load balancer is a ~16 MB document. Reading its `provisioningState` or
//! editing a few `adminState`s must not cost a second copy of it plus a tree of it, so the
//! documents are scanned once, byte by byte, and a [`Sink`] keeps only what it needs: the
//! offsets of the values to change (the splicer, `lb::splice`) or two short strings (the
//! completion reads). Input may arrive in chunks of any size ([`Scanner::feed`]); offsets
//! count from the first byte ever fed.

/// One open container: what a [`Sink`] sees as the path of a value.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// An object (else an array).
    pub object: bool,
    /// In an object: the current member's key, raw (escapes kept), and where its opening
    /// quote is.
    pub key: Vec<u8>,
    pub key_at: usize,
    /// Values seen so far in this container.
    pub members: usize,
    /// Where its opening bracket is.
    pub open_at: usize,
}

/// Receives what the scanner finds. `path` is the stack of containers enclosing the value;
/// in an object the value's own key is `path.last().key`.
pub trait Sink {
    /// A container opens at `at` (the bracket).
    fn open(&mut self, _path: &[Frame], _at: usize) {}
    /// `frame` closes at `at` (the bracket).
    fn close(&mut self, _path: &[Frame], _frame: &Frame, _at: usize) {}
    /// Whether the text of the string value starting now is wanted in [`Sink::scalar`].
    fn wants_text(&self, _path: &[Frame]) -> bool {
        false
    }
    /// A string, number or literal spans `start..end` (quotes included). `text` is the raw
    /// string content (escapes kept) when [`Sink::wants_text`] asked for it.
    fn scalar(&mut self, _path: &[Frame], _start: usize, _end: usize, _text: Option<&[u8]>) {}
}

/// Not JSON, or nested deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {at}: {what}")]
pub struct ScanError {
    pub at: usize,
    pub what: &'static str,
}

/// Nesting deeper than this is refused (ARM documents use fewer than 12 levels).
pub const MAX_DEPTH: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the top-level value.
    Start,
    /// After `:` or `,` in an array.
    Value,
    /// After `[`.
    ValueOrClose,
    /// After `{`.
    KeyOrClose,
    /// After `,` in an object.
    Key,
    /// After a key.
    Colon,
    /// After a value.
    After,
    /// Inside a string; `key` when it is a member key.
    Str { key: bool, escape: bool },
    /// Inside a number or literal.
    Scalar,
    /// The top-level value ended.
    Done,
}

/// The tokenizer. Feed it chunks, then call [`Scanner::finish`].
#[derive(Debug)]
pub struct Scanner {
    pos: usize,
    state: State,
    /// The open containers are `stack[..depth]`. Frames above stay allocated for reuse: a
    /// 16 MB document opens ~100,000 objects, and a fresh key buffer for each cost more than
    /// the scan.
    stack: Vec<Frame>,
    depth: usize,
    /// The text of the string being read, when wanted (always for keys).
    text: Vec<u8>,
    capture: bool,
    start: usize,
}

impl Default for Scanner {
    fn default() -> Self {
        Self::new()
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Scanner {
    pub fn new() -> Self {
        Self {
            pos: 0,
            state: State::Start,
            stack: Vec::new(),
            depth: 0,
            text: Vec::new(),
            capture: false,
            start: 0,
        }
    }

    fn err(&self, what: &'static str) -> ScanError {
        ScanError { at: self.pos, what }
    }

    /// Scans the next chunk of the document.
    pub fn feed(&mut self, chunk: &[u8], sink: &mut impl Sink) -> Result<(), ScanError> {
        let mut i = 0;
        while i < chunk.len() {
            if let State::Str { key, escape: false } = self.state {
                // Most of an LB document is IDs inside strings: take a string's plain bytes
                // in one step instead of one state transition each.
                let rest = &chunk[i..];
                let plain = rest
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    .unwrap_or(rest.len());
                if plain > 0 {
                    if key || self.capture {
                        self.text.extend_from_slice(&rest[..plain]);
                    }
                    i += plain;
                    self.pos += plain;
                    continue;
                }
            }
            self.byte(chunk[i], sink)?;
            self.pos += 1;
            i += 1;
        }
        Ok(())
    }

    /// Ends the document: errors unless exactly one complete value was read.
    pub fn finish(&mut self, sink: &mut impl Sink) -> Result<(), ScanError> {
        if self.state == State::Scalar && self.depth == 0 {
            sink.scalar(&[], self.start, self.pos, None);
            self.state = State::Done;
        }
        match self.state {
            State::Done => Ok(()),
            _ => Err(self.err("unexpected end")),
        }
    }

    fn begin_value(&mut self, b: u8, sink: &mut impl Sink) -> Result<(), ScanError> {
        if let Some(parent) = self.depth.checked_sub(1).map(|i| &mut self.stack[i]) {
            parent.members += 1;
        }
        match b {
            b'{' | b'[' => {
                if self.depth >= MAX_DEPTH {
                    return Err(self.err("nested too deep"));
                }
                sink.open(self.path(), self.pos);
                let object = b == b'{';
                if self.depth == self.stack.len() {
                    self.stack.push(Frame::default());
                }
                let f = &mut self.stack[self.depth];
                f.object = object;
                f.key.clear();
                f.key_at = 0;
                f.members = 0;
                f.open_at = self.pos;
                self.depth += 1;
                self.state = if object {
                    State::KeyOrClose
                } else {
                    State::ValueOrClose
                };
            }
            b'"' => {
                self.capture = sink.wants_text(self.path());
                self.text.clear();
                self.start = self.pos;
                self.state = State::Str {
                    key: false,
                    escape: false,
                };
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                self.start = self.pos;
                self.state = State::Scalar;
            }
            _ => return Err(self.err("expected a value")),
        }
        Ok(())
    }

    fn close(&mut self, b: u8, sink: &mut impl Sink) -> Result<(), ScanError> {
        let Some(top) = self.depth.checked_sub(1) else {
            return Err(self.err("unbalanced bracket"));
        };
        if self.stack[top].object != (b == b'}') {
            return Err(self.err("mismatched bracket"));
        }
        self.depth = top;
        sink.close(&self.stack[..top], &self.stack[top], self.pos);
        self.after_value();
        Ok(())
    }

    /// The open containers.
    fn path(&self) -> &[Frame] {
        &self.stack[..self.depth]
    }

    fn after_value(&mut self) {
        self.state = if self.depth == 0 {
            State::Done
        } else {
            State::After
        };
    }

    fn byte(&mut self, b: u8, sink: &mut impl Sink) -> Result<(), ScanError> {
        match self.state {
            State::Str { key, escape } => {
                if escape {
                    self.state = State::Str { key, escape: false };
                } else if b == b'"' {
                    if key {
                        let Some(frame) = self.depth.checked_sub(1).map(|i| &mut self.stack[i])
                        else {
                            return Err(self.err("key outside an object"));
                        };
                        std::mem::swap(&mut frame.key, &mut self.text);
                        frame.key_at = self.start;
                        self.state = State::Colon;
                    } else {
                        let text = self.capture.then_some(self.text.as_slice());
                        sink.scalar(self.path(), self.start, self.pos + 1, text);
                        self.after_value();
                    }
                    return Ok(());
                } else if b == b'\\' {
                    self.state = State::Str { key, escape: true };
                } else if b < 0x20 {
                    return Err(self.err("control character in a string"));
                }
                if key || self.capture {
                    self.text.push(b);
                }
                Ok(())
            }
            State::Scalar => {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.') {
                    return Ok(());
                }
                sink.scalar(self.path(), self.start, self.pos, None);
                self.after_value();
                self.byte(b, sink)
            }
            _ if is_ws(b) => Ok(()),
            State::Start | State::Value => self.begin_value(b, sink),
            State::ValueOrClose if b == b']' => self.close(b, sink),
            State::ValueOrClose => self.begin_value(b, sink),
            State::KeyOrClose if b == b'}' => self.close(b, sink),
            State::KeyOrClose | State::Key if b == b'"' => {
                self.text.clear();
                self.start = self.pos;
                self.state = State::Str {
                    key: true,
                    escape: false,
                };
                Ok(())
            }
            State::KeyOrClose | State::Key => Err(self.err("expected a key")),
            State::Colon if b == b':' => {
                self.state = State::Value;
                Ok(())
            }
            State::Colon => Err(self.err("expected ':'")),
            State::After => match b {
                b',' => {
                    let object = self.path().last().is_some_and(|f| f.object);
                    self.state = if object { State::Key } else { State::Value };
                    Ok(())
                }
                b'}' | b']' => self.close(b, sink),
                _ => Err(self.err("expected ',' or a closing bracket")),
            },
            State::Done => Err(self.err("trailing characters")),
        }
    }
}

/// True when `path` is, level by level, an object member named `Some(key)` or an array
/// element (`None`).
pub fn path_is(path: &[Frame], want: &[Option<&str>]) -> bool {
    path.len() == want.len()
        && path.iter().zip(want).all(|(f, w)| match w {
            Some(k) => f.object && f.key == k.as_bytes(),
            None => !f.object,
        })
}

/// A sink that wants nothing.
impl Sink for () {}

/// Two sinks fed by one scan: a document read for two purposes is tokenized once.
pub struct Both<'a, A, B>(pub &'a mut A, pub &'a mut B);

impl<A: Sink, B: Sink> Sink for Both<'_, A, B> {
    fn open(&mut self, path: &[Frame], at: usize) {
        self.0.open(path, at);
        self.1.open(path, at);
    }

    fn close(&mut self, path: &[Frame], frame: &Frame, at: usize) {
        self.0.close(path, frame, at);
        self.1.close(path, frame, at);
    }

    fn wants_text(&self, path: &[Frame]) -> bool {
        self.0.wants_text(path) || self.1.wants_text(path)
    }

    // Each sink may see text it did not ask for; the sinks here read only what they asked.
    fn scalar(&mut self, path: &[Frame], start: usize, end: usize, text: Option<&[u8]>) {
        self.0.scalar(path, start, end, text);
        self.1.scalar(path, start, end, text);
    }
}

/// The etag and `provisioningState` of a whole document, read from its first bytes (they
/// come first: [`LbState::complete`]); the rest is scanned only when they were not there.
pub fn lb_state(doc: &[u8]) -> Result<LbState, ScanError> {
    const STEP: usize = 4096;
    let mut state = LbState::default();
    let mut s = Scanner::new();
    for chunk in doc.chunks(STEP) {
        s.feed(chunk, &mut state)?;
        if state.complete() {
            return Ok(state);
        }
    }
    s.finish(&mut state)?;
    Ok(state)
}

/// Scans a whole document.
pub fn scan(doc: &[u8], sink: &mut impl Sink) -> Result<(), ScanError> {
    let mut s = Scanner::new();
    s.feed(doc, sink)?;
    s.finish(sink)
}

/// The text of a string captured raw, unescaped (ARM names rarely have escapes).
pub fn unescape(raw: &[u8]) -> Option<String> {
    if !raw.contains(&b'\\') {
        return std::str::from_utf8(raw).ok().map(str::to_owned);
    }
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    serde_json::from_slice(&quoted).ok()
}

/// The two things a completion read needs: the etag and the LB's own `provisioningState`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LbState {
    pub etag: Option<String>,
    pub provisioning_state: Option<String>,
}

impl LbState {
    /// Both found: a completion read may stop here. NRP writes `etag` before `properties`
    /// and `provisioningState` first in it (contracts/arm.md section 9), so this is the first
    /// few hundred bytes of the document, however many entries follow.
    pub fn complete(&self) -> bool {
        self.etag.is_some() && self.provisioning_state.is_some()
    }
}

impl Sink for LbState {
    fn wants_text(&self, path: &[Frame]) -> bool {
        path_is(path, &[Some("etag")])
            || path_is(path, &[Some("properties"), Some("provisioningState")])
    }

    fn scalar(&mut self, path: &[Frame], _start: usize, _end: usize, text: Option<&[u8]>) {
        let Some(text) = text else { return };
        if path.len() == 1 {
            self.etag = unescape(text);
        } else {
            self.provisioning_state = unescape(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every scalar as (path keys, raw bytes).
    #[derive(Default)]
    struct All<'a> {
        doc: &'a [u8],
        seen: Vec<(String, String)>,
    }

    impl Sink for All<'_> {
        fn scalar(&mut self, path: &[Frame], start: usize, end: usize, _t: Option<&[u8]>) {
            let p: Vec<String> = path
                .iter()
                .map(|f| {
                    if f.object {
                        String::from_utf8_lossy(&f.key).into_owned()
                    } else {
                        "[]".into()
                    }
                })
                .collect();
            let v = String::from_utf8_lossy(&self.doc[start..end]).into_owned();
            self.seen.push((p.join("."), v));
        }
    }

    #[test]
    fn scalars_carry_their_path_and_exact_span() {
        let doc = br#" {"a": [1, -2.5e3, "x\"y", true], "b": {"c": null, "d": {}}, "e": []} "#;
        let mut all = All {
            doc,
            ..Default::default()
        };
        scan(doc, &mut all).unwrap();
        let want = [
            ("a.[]", "1"),
            ("a.[]", "-2.5e3"),
            ("a.[]", r#""x\"y""#),
            ("a.[]", "true"),
            ("b.c", "null"),
        ];
        let got: Vec<(&str, &str)> = all
            .seen
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn chunking_does_not_change_what_is_found() {
        let doc = br#"{"etag":"W/\"7\"","name":"lb","properties":{"backendAddressPools":[{"properties":{"provisioningState":"Updating"}}],"provisioningState":"Succeeded"}}"#;
        for size in [1, 2, 3, 7, 64] {
            let mut st = LbState::default();
            let mut s = Scanner::new();
            for chunk in doc.chunks(size) {
                s.feed(chunk, &mut st).unwrap();
            }
            s.finish(&mut st).unwrap();
            assert_eq!(st.etag.as_deref(), Some("W/\"7\""), "chunk {size}");
            assert_eq!(st.provisioning_state.as_deref(), Some("Succeeded"));
        }
    }

    #[test]
    fn every_split_of_a_document_gives_the_same_paths_and_spans() {
        // Keys and strings with escapes, containers closed and reopened at the same depth
        // (their frames are reused and must not keep the old key).
        let doc = br#"{"p\"q":{"x":{"k":"v\\w"}},"r":{"y":{"k2":[1,"a\"b",{"z":null}]}},"s":"t"}"#;
        let whole = {
            let mut all = All {
                doc,
                ..Default::default()
            };
            scan(doc, &mut all).unwrap();
            all.seen
        };
        assert!(
            whole.contains(&("r.y.k2.[].z".into(), "null".into())),
            "{whole:?}"
        );
        for size in 1..=doc.len() {
            let mut all = All {
                doc,
                ..Default::default()
            };
            let mut s = Scanner::new();
            for chunk in doc.chunks(size) {
                s.feed(chunk, &mut all).unwrap();
            }
            s.finish(&mut all).unwrap();
            assert_eq!(all.seen, whole, "chunks of {size}");
        }
    }

    #[test]
    fn the_state_is_read_from_the_first_bytes_of_a_large_document() {
        let mut doc =
            br#"{"etag":"W/\"9\"","properties":{"provisioningState":"Updating","pools":["#.to_vec();
        doc.extend(std::iter::repeat_n(b"\"entry\",".as_slice(), 100_000).flatten());
        // Not even valid JSON past the first bytes: nothing there was read.
        doc.extend_from_slice(b"}}}");
        let st = lb_state(&doc).unwrap();
        assert_eq!(st.etag.as_deref(), Some("W/\"9\""));
        assert_eq!(st.provisioning_state.as_deref(), Some("Updating"));
        // Without the state up front the whole document is read, and must be JSON.
        assert!(
            lb_state(br#"{"name":"lb","properties":{}}"#)
                .unwrap()
                .etag
                .is_none()
        );
        assert!(lb_state(br#"{"name":"lb","#).is_err());
    }

    #[test]
    fn malformed_documents_are_errors() {
        for bad in [
            &b""[..],
            b"{",
            b"{\"a\" 1}",
            b"[1,]x",
            b"{\"a\":1]",
            b"{} {}",
            b"\"open",
            b"[}",
            b"{1:2}",
        ] {
            assert!(
                scan(bad, &mut LbState::default()).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert!(scan(deep.as_bytes(), &mut LbState::default()).is_err());
        assert!(scan(b"3", &mut LbState::default()).is_ok());
    }
}

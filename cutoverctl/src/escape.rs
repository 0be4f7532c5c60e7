//! Everything cutoverctl prints that came from the network goes through here: node names,
//! reasons, notes and error messages are written by other programs (or an attacker), and a raw
//! ESC, BEL, C1 control or bidi override would let them repaint, retitle or reorder the
//! operator's terminal. Table text gets `\u{..}` escapes; JSON gets `\uXXXX` escapes, so the
//! output stays valid JSON that decodes back to the exact value.

use std::borrow::Cow;
use std::fmt::Write as _;

/// True for characters that must not reach a terminal raw: C0 and C1 controls, DEL, and the
/// invisible formatting characters that reorder or hide text (zero-width, bidi controls,
/// line and paragraph separators, BOM).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// `s` for a table cell or a message line: unsafe characters as `\u{1b}`.
pub fn text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `value` as one line of JSON. serde_json escapes C0 controls itself; DEL, C1 controls and
/// formatting characters (all in the Basic Multilingual Plane, and only ever inside strings)
/// become `\uXXXX` here.
pub fn json(value: &serde_json::Value) -> String {
    let raw = value.to_string();
    if !raw.chars().any(is_unsafe) {
        return raw;
    }
    let mut out = String::with_capacity(raw.len() + 8);
    for c in raw.chars() {
        if is_unsafe(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOSTILE: &str =
        "aks\u{0}\u{7}\u{1b}[2J\u{1b}]0;t\u{7}\n\r\t\u{7f}\u{9b}31m\u{202e}x\u{2028}";

    fn inert(out: &str) -> bool {
        !out.chars().any(is_unsafe)
    }

    #[test]
    fn table_text_is_escaped_and_plain_text_untouched() {
        let out = text(HOSTILE);
        assert!(inert(&out), "{out:?}");
        assert!(out.starts_with("aks\\u{0}\\u{7}\\u{1b}[2J"), "{out}");
        assert!(matches!(text("aks-nodepool1-0 é ü"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_stays_valid_and_round_trips() {
        let v = json!({"name": HOSTILE, "notes": ["ok", "\u{85}"]});
        let out = json(&v);
        assert!(inert(&out), "{out:?}");
        assert!(!out.contains('\n'));
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back, v);
    }
}

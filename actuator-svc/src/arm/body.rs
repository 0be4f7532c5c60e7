//! A request body sent from chunks (slices of a read document and small replacements) with
//! an exact length, so a 16 MB whole-LB PUT never needs a second copy of the document: each
//! chunk goes to hyper as one frame.

use bytes::Bytes;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Chunks sent in order as body frames, without copying them; cheap to clone (a request that
/// is tried again gets a clone from the first chunk).
#[derive(Debug, Clone)]
pub struct ChunkBody {
    chunks: Arc<[Bytes]>,
    len: usize,
    /// The next chunk.
    at: usize,
}

impl ChunkBody {
    pub fn new(chunks: Vec<Bytes>) -> Self {
        let len = chunks.iter().map(Bytes::len).sum();
        Self {
            chunks: chunks.into(),
            len,
            at: 0,
        }
    }

    /// No body at all.
    pub fn empty() -> Self {
        Self::new(Vec::new())
    }

    /// The exact length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn next_chunk(&mut self) -> Option<Bytes> {
        while let Some(chunk) = self.chunks.get(self.at) {
            self.at += 1;
            if !chunk.is_empty() {
                return Some(chunk.clone());
            }
        }
        None
    }

    fn remaining(&self) -> u64 {
        self.chunks
            .get(self.at..)
            .map_or(0, |rest| rest.iter().map(|c| c.len() as u64).sum())
    }
}

impl http_body::Body for ChunkBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Poll::Ready(
            self.get_mut()
                .next_chunk()
                .map(|c| Ok(http_body::Frame::data(c))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.remaining() == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body;

    #[test]
    fn sends_every_chunk_in_order_with_an_exact_length() {
        let mut b = ChunkBody::new(vec![
            Bytes::from_static(b"hello "),
            Bytes::new(),
            Bytes::from_static(b"spliced"),
            Bytes::from_static(b" world"),
        ]);
        assert_eq!(b.len(), 19);
        assert_eq!(b.size_hint().exact(), Some(19));
        let again = b.clone();
        let mut out = Vec::new();
        while let Some(c) = b.next_chunk() {
            out.extend_from_slice(&c);
        }
        assert_eq!(out, b"hello spliced world");
        assert!(b.is_end_stream());
        assert_eq!(b.size_hint().exact(), Some(0));
        // A clone taken before sending starts from the first chunk.
        assert_eq!(again.size_hint().exact(), Some(19));
        assert!(ChunkBody::empty().is_end_stream());
    }
}

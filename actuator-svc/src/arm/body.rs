//! A request body sent from chunks (slices of a read document and small replacements) with
//! an exact length, so a 16 MB whole-LB PUT never needs a second copy of the document.

use azure_core::SeekableStream;
use bytes::Bytes;
use futures::io::AsyncRead;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Chunks read in order; cheap to clone (azure_core clones the body per attempt).
#[derive(Debug, Clone)]
pub struct ChunkBody {
    chunks: Arc<[Bytes]>,
    len: usize,
    /// The next chunk and the offset in it.
    at: (usize, usize),
}

impl ChunkBody {
    pub fn new(chunks: Vec<Bytes>) -> Self {
        let len = chunks.iter().map(Bytes::len).sum();
        Self {
            chunks: chunks.into(),
            len,
            at: (0, 0),
        }
    }

    fn read_into(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(chunk) = self.chunks.get(self.at.0) else {
                break;
            };
            let rest = &chunk[self.at.1..];
            let take = rest.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&rest[..take]);
            n += take;
            self.at.1 += take;
            if self.at.1 == chunk.len() {
                self.at = (self.at.0 + 1, 0);
            }
        }
        n
    }
}

impl AsyncRead for ChunkBody {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(self.get_mut().read_into(buf)))
    }
}

#[async_trait::async_trait]
impl SeekableStream for ChunkBody {
    async fn reset(&mut self) -> azure_core::Result<()> {
        self.at = (0, 0);
        Ok(())
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Smaller than azure_core's 64 KiB: each read allocates a buffer of this size.
    fn buffer_size(&self) -> usize {
        16 * 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_chunk_in_order_across_buffer_boundaries() {
        let mut b = ChunkBody::new(vec![
            Bytes::from_static(b"hello "),
            Bytes::new(),
            Bytes::from_static(b"spliced"),
            Bytes::from_static(b" world"),
        ]);
        assert_eq!(b.len, 19);
        let mut out = Vec::new();
        let mut buf = [0u8; 4];
        loop {
            let n = b.read_into(&mut buf);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        assert_eq!(out, b"hello spliced world");
        b.at = (0, 0);
        let mut all = [0u8; 64];
        assert_eq!(b.read_into(&mut all), 19);
    }
}
